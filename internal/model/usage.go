package model

import "math"

// Tokens is a token count as a provider reported it, made safe to add
// up: a negative count (a server that is broken, or hostile: the endpoint
// is the tenant's choice) is 0, and counts given together are summed
// without wrapping around (a sum past math.MaxInt64 is math.MaxInt64).
// A negative count would lower what a run has spent, and so let it spend
// past its budget.
func Tokens(counts ...int64) int64 {
	var sum int64
	for _, n := range counts {
		if n <= 0 {
			continue
		}
		if n > math.MaxInt64-sum {
			return math.MaxInt64
		}
		sum += n
	}
	return sum
}
