package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// Every cut of a text with multi-byte runes at every position is valid
// UTF-8, within its budget, and as long as it can be.
func TestHeadAndTail_neverSplitARune(t *testing.T) {
	s := "a€b𝄞cé" // 1, 3, 1, 4, 1 and 2 bytes
	for n := -1; n <= len(s)+1; n++ {
		h, tl := Head(s, n), Tail(s, n)
		for _, got := range []string{h, tl} {
			if !utf8.ValidString(got) || len(got) > max(n, 0) && len(got) != len(s) {
				t.Errorf("n=%d: %q is not valid UTF-8 of at most %d bytes", n, got, n)
			}
		}
		if !strings.HasPrefix(s, h) || !strings.HasSuffix(s, tl) {
			t.Errorf("n=%d: head %q, tail %q are not of %q", n, h, tl, s)
		}
		// As long as it can be: one more rune would not fit.
		if rest := s[len(h):]; rest != "" {
			if _, size := utf8.DecodeRuneInString(rest); len(h)+size <= n {
				t.Errorf("n=%d: head %q stops short", n, h)
			}
		}
		if rest := s[:len(s)-len(tl)]; rest != "" {
			if _, size := utf8.DecodeLastRuneInString(rest); len(tl)+size <= n {
				t.Errorf("n=%d: tail %q stops short", n, tl)
			}
		}
	}
	if got := Tail("€uro"[1:], 100); got != "uro" {
		t.Errorf("Tail kept the end of a sequence begun before it: %q", got)
	}
	if got := Head([]byte("€uro"), 2); len(got) != 0 {
		t.Errorf("Head of bytes cut the euro sign: %q", got)
	}
}

func TestCut_theMarkIsCountedAndARuneAtTheCutIsKeptWhole(t *testing.T) {
	s := strings.Repeat("x", 7) + "é" + "tail" // é spans bytes 7 and 8
	tests := []struct {
		n          int
		cut, ofEnd string
	}{
		{len(s), s, s},
		{11, "xxxxxxx...", "...xxétail"}, // the head's cut falls inside é
		{8, "xxxxx...", "...tail"},       // the tail's cut falls inside é
		{3, "...", "..."},
		{2, "..", ".."},
	}
	for _, tt := range tests {
		if got := Cut(s, tt.n, "..."); got != tt.cut {
			t.Errorf("Cut(%d) = %q, want %q", tt.n, got, tt.cut)
		}
		if got := CutTail(s, tt.n, "..."); got != tt.ofEnd {
			t.Errorf("CutTail(%d) = %q, want %q", tt.n, got, tt.ofEnd)
		}
	}
	// The rune at the cut is the euro sign (bytes 3 to 5 with n = 4).
	if got := Cut("abc€def", 7, "..."); got != "abc..." {
		t.Errorf("Cut = %q, want abc...", got)
	}
}

// Invalid input is cut at the budget rather than scanned backwards.
func TestHead_invalidInputIsCutAtTheBudget(t *testing.T) {
	s := "ab" + strings.Repeat("\x80", 10)
	if got := Head(s, 8); got != s[:8] {
		t.Errorf("Head = %q, want the first 8 bytes", got)
	}
}

func TestWriters_keepTheHeadAndTheTailOfAStream(t *testing.T) {
	h, tl := &HeadWriter{Limit: 5}, &TailWriter{Limit: 5}
	for _, p := range []string{"ab", "cdé", "fgh", strings.Repeat("x", 3) + "€"} {
		_, _ = h.Write([]byte(p))
		_, _ = tl.Write([]byte(p))
	}
	if string(h.Bytes()) != "abcd\xc3" || h.Size() != 15 {
		t.Errorf("head %q of %d bytes, want the first 5 of 15", h.Bytes(), h.Size())
	}
	// The last 5 bytes: two x and the euro sign's three.
	if got := tl.String(); got != "xx€" || !tl.Dropped() {
		t.Errorf("tail %q (dropped %v), want xx€ and dropped", got, tl.Dropped())
	}
	long := &TailWriter{Limit: 4}
	_, _ = long.Write([]byte("é" + "abc"))
	if got := long.String(); got != "abc" {
		t.Errorf("tail %q, want abc: the cut é is left out", got)
	}
	short := &TailWriter{Limit: 10}
	_, _ = short.Write([]byte("ok"))
	if short.String() != "ok" || short.Dropped() {
		t.Errorf("a short stream: %q, dropped %v", short.String(), short.Dropped())
	}
}
