// Package clip cuts text to a byte budget without splitting a UTF-8
// sequence. It is the one truncation helper of the project: statuses,
// failure details, provider messages, tool output tails and Job names all
// go through it. It imports nothing but the standard library, so the
// engine (internal/loop) and the tool entrypoint binary can both use it.
package clip

import "unicode/utf8"

// Head returns the longest prefix of s of at most n bytes that does not
// end inside a UTF-8 sequence. A negative n counts as zero.
func Head[S ~string | ~[]byte](s S, n int) S {
	if n >= len(s) {
		return s
	}
	n = max(n, 0)
	// s[n] is the first byte left out: back up while it continues the
	// sequence the kept bytes would end in. A valid sequence has at most
	// UTFMax-1 continuation bytes; invalid input is cut where it stands.
	for i := n; i >= 0 && n-i < utf8.UTFMax; i-- {
		if utf8.RuneStart(s[i]) {
			return s[:i]
		}
	}
	return s[:n]
}

// Tail returns the longest suffix of s of at most n bytes that does not
// start inside a UTF-8 sequence: bytes that continue a sequence begun
// before the suffix, or before s (s being the end of a longer text), are
// left out. A negative n counts as zero.
func Tail[S ~string | ~[]byte](s S, n int) S {
	start := len(s) - min(max(n, 0), len(s))
	for i := start; i < len(s) && i-start < utf8.UTFMax; i++ {
		if utf8.RuneStart(s[i]) {
			return s[i:]
		}
	}
	if start+utf8.UTFMax >= len(s) {
		return s[len(s):]
	}
	return s[start:] // invalid input is cut where it stands
}

// Cut returns s when it fits in n bytes, and otherwise its beginning
// followed by mark, the two together at most n bytes (mark alone, cut to
// n, when n leaves no room for text).
func Cut(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	if len(mark) >= n {
		return Head(mark, n)
	}
	return Head(s, n-len(mark)) + mark
}

// CutTail returns s when it fits in n bytes, and otherwise mark followed
// by the end of s, the two together at most n bytes: the end of a
// process's standard error says the most.
func CutTail(s string, n int, mark string) string {
	if len(s) <= n {
		return s
	}
	if len(mark) >= n {
		return Head(mark, n)
	}
	return mark + Tail(s, n-len(mark))
}
