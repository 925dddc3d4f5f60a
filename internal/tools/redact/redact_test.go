package redact

import "testing"

func TestBytes_hidesEveryUsualSpellingOfTheValue(t *testing.T) {
	forms := Forms("Bearer sk-live/abc+def<ghi>\n", "x")
	for _, tc := range []struct{ in, want string }{
		{`{"headers":{"Authorization":"Bearer sk-live/abc+def<ghi>"}}`, `{"headers":{"Authorization":"[redacted]"}}`},
		{`token=sk-live/abc+def<ghi>`, `token=[redacted]`},
		{`{"auth":"Bearer sk-live/abc+def\u003cghi\u003e"}`, `{"auth":"[redacted]"}`},
		{`?key=sk-live%2Fabc%2Bdef%3Cghi%3E&x=1`, `?key=[redacted]&x=1`},
		{`a short x stays`, `a short x stays`},
		{`nothing secret here`, `nothing secret here`},
	} {
		if got := string(Bytes([]byte(tc.in), forms)); got != tc.want {
			t.Errorf("Bytes(%q) = %q, want %q", tc.in, got, tc.want)
		}
	}
	if got := String("Bearer sk-live/abc+def<ghi> twice sk-live/abc+def<ghi>", forms); got != "[redacted] twice [redacted]" {
		t.Errorf("String = %q", got)
	}
}
