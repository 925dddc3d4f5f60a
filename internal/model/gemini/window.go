package gemini

import "strings"

// ContextWindow is the input limit of the named Gemini model, or 0 when
// the adapter does not know it: 1,048,576 tokens for Gemini 1.5, 2.0,
// 2.5 and 3 models (Gemini 1.5 Pro's 2,097,152 included as the smaller
// figure its tier documents for every account).
func ContextWindow(name string) int64 {
	name = strings.TrimPrefix(name, "models/")
	for _, p := range []string{"gemini-1.5-", "gemini-2.0-", "gemini-2.5-", "gemini-3"} {
		if strings.HasPrefix(name, p) {
			return 1_048_576
		}
	}
	return 0
}
