// Package safeterm makes text from models and tools safe to print on a
// terminal. A model's answer or a tool's output can carry escape sequences
// that move the cursor, rewrite lines already printed, change the window
// title or hide text; printed as they are, they could make a pending call
// look harmless or forge an operator's message. Clean removes them and
// every other control character but newline and tab.
package safeterm

import (
	"io"
	"strings"
	"unicode/utf8"
)

// Clean returns s without terminal control: ANSI escape sequences (CSI,
// OSC, DCS and the other string sequences, whole, in their 7-bit and 8-bit
// forms), C0 and C1 control characters other than \n and \t (a carriage
// return too: it rewrites the line), DEL, and the Unicode bidirectional
// overrides and isolates that reorder what is shown. Invalid UTF-8 becomes
// U+FFFD. Text without any of these is returned unchanged.
func Clean(s string) string {
	if !needsCleaning(s) {
		return s
	}
	var b strings.Builder
	b.Grow(len(s))
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		i += n
		switch {
		case r == '\n' || r == '\t':
			b.WriteRune(r)
		case r == 0x1b: // ESC
			i = skipEscape(s, i)
		case r == 0x9b: // CSI, 8-bit
			i = skipCSI(s, i)
		case r == 0x90 || r == 0x9d || r == 0x98 || r == 0x9e || r == 0x9f: // DCS, OSC, SOS, PM, APC, 8-bit
			i = skipString(s, i)
		case r < 0x20 || r == 0x7f || (r >= 0x80 && r <= 0x9f) || bidi(r):
			// dropped
		default:
			b.WriteRune(r) // U+FFFD for an invalid byte
		}
	}
	return b.String()
}

func needsCleaning(s string) bool {
	for i := 0; i < len(s); {
		r, n := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && n <= 1 {
			return true
		}
		if (r < 0x20 && r != '\n' && r != '\t') || r == 0x7f || (r >= 0x80 && r <= 0x9f) || bidi(r) {
			return true
		}
		i += n
	}
	return false
}

// bidi reports the explicit directional formatting characters.
func bidi(r rune) bool {
	return (r >= 0x202a && r <= 0x202e) || (r >= 0x2066 && r <= 0x2069)
}

// skipEscape skips what follows an ESC at s[:i] and returns the index after
// the sequence.
func skipEscape(s string, i int) int {
	if i >= len(s) {
		return i
	}
	switch c := s[i]; {
	case c == '[':
		return skipCSI(s, i+1)
	case c == ']' || c == 'P' || c == 'X' || c == '^' || c == '_':
		return skipString(s, i+1)
	case c >= 0x20 && c <= 0x2f:
		// Intermediate bytes, then one final byte.
		for i < len(s) && s[i] >= 0x20 && s[i] <= 0x2f {
			i++
		}
		if i < len(s) && s[i] >= 0x30 && s[i] <= 0x7e {
			i++
		}
		return i
	case c >= 0x30 && c <= 0x7e:
		return i + 1 // a two-character sequence (ESC 7, ESC c ...)
	}
	return i
}

// skipCSI skips a control sequence's parameter and intermediate bytes and
// its final byte.
func skipCSI(s string, i int) int {
	for i < len(s) {
		c := s[i]
		i++
		if c >= 0x40 && c <= 0x7e {
			return i
		}
		if c < 0x20 || c > 0x7e {
			// Not part of a well-formed sequence: end it here and let the
			// caller look at this byte again.
			return i - 1
		}
	}
	return i
}

// skipString skips a control string up to its terminator: BEL, ST (ESC \)
// or the 8-bit ST, or the end of s.
func skipString(s string, i int) int {
	for i < len(s) {
		switch {
		case s[i] == 0x07:
			return i + 1
		case s[i] == 0x1b && i+1 < len(s) && s[i+1] == '\\':
			return i + 2
		case strings.HasPrefix(s[i:], "\u009c"):
			return i + len("\u009c")
		}
		i++
	}
	return i
}

// Writer returns a writer that cleans each Write with Clean before passing
// it to w. The commands wrap their standard output and error with it, so
// nothing a model or tool said reaches the terminal raw. Each Write is
// cleaned on its own (the commands write whole lines).
func Writer(w io.Writer) io.Writer { return cleaner{w} }

type cleaner struct{ w io.Writer }

func (c cleaner) Write(p []byte) (int, error) {
	if _, err := io.WriteString(c.w, Clean(string(p))); err != nil {
		return 0, err
	}
	return len(p), nil
}
