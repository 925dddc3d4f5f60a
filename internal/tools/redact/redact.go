// Package redact hides Secret values in what a tool answered. A server
// that echoes a request's headers back (a debugging endpoint, an error
// page that quotes the request) would otherwise put an API key read from
// a Secret into the model's context, the run's status and its transcript.
package redact

import (
	"bytes"
	"encoding/json"
	"net/url"
	"slices"
	"strings"
)

// Mark replaces every hidden value.
const Mark = "[redacted]"

// MinLength is the shortest value hidden: shorter ones (a "1", a "yes")
// would shred ordinary text and are no credential anyway.
const MinLength = 6

// Forms returns the spellings of a Secret value worth hiding: the value
// itself, its last word (the token of "Bearer <token>" or "Basic
// <base64>"), and each of those as JSON string content and URL-escaped,
// the ways an echo usually quotes them. Longest first, so a longer form is
// replaced before a shorter one inside it.
func Forms(values ...string) []string {
	var out []string
	add := func(s string) {
		if len(s) >= MinLength && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	for _, v := range values {
		v = strings.TrimSpace(v)
		words := strings.Fields(v)
		for _, w := range []string{v, lastOf(words)} {
			add(w)
			if b, err := json.Marshal(w); err == nil {
				add(string(b[1 : len(b)-1]))
			}
			add(url.QueryEscape(w))
		}
	}
	slices.SortStableFunc(out, func(a, b string) int { return len(b) - len(a) })
	return out
}

func lastOf(words []string) string {
	if len(words) < 2 {
		return ""
	}
	return words[len(words)-1]
}

// Bytes returns b with every occurrence of forms (from Forms) replaced by
// Mark. b itself is not changed.
func Bytes(b []byte, forms []string) []byte {
	for _, f := range forms {
		if bytes.Contains(b, []byte(f)) {
			b = bytes.ReplaceAll(b, []byte(f), []byte(Mark))
		}
	}
	return b
}

// String is Bytes for a string.
func String(s string, forms []string) string {
	for _, f := range forms {
		s = strings.ReplaceAll(s, f, Mark)
	}
	return s
}

// TrimPartial drops the end of a cut output when it is the beginning of a
// form: the rest of the value was cut off, its first part must not stay.
func TrimPartial(b []byte, forms []string) []byte {
	for _, f := range forms {
		for k := min(len(f)-1, len(b)); k > 0; k-- {
			if bytes.HasSuffix(b, []byte(f[:k])) {
				b = b[:len(b)-k]
				break
			}
		}
	}
	return b
}

// Longest is the length of the longest form, 0 for none.
func Longest(forms []string) int {
	if len(forms) == 0 {
		return 0
	}
	return len(forms[0])
}
