package loop

import (
	"bytes"
	"encoding/json"
	"strings"
	"testing"
	"unicode/utf8"
)

func TestObserve(t *testing.T) {
	big := bytes.Repeat([]byte("<div class=row><span>text</span></div>\n"), 10<<20/40)
	bigHTML := append([]byte("<!DOCTYPE html><html><head><style>.x{}</style><script>var a=1</script></head><body>"), big...)
	cases := []struct {
		name     string
		r        Result
		max      int
		status   ObsStatus
		contains []string
		absent   []string
	}{
		{"plain result", Result{Output: []byte(`{"account_id":"acct_1"}`)}, 100, ObsOK, []string{`{"account_id":"acct_1"}`}, nil},
		{"nothing at all", Result{}, 100, ObsOK, []string{"lookup succeeded and returned no output."}, nil},
		{"invalid UTF-8 becomes replacement characters", Result{Output: []byte("ok \xff\xfe done")}, 100, ObsOK, []string{"ok \uFFFD done"}, nil},
		{"long results are cut and the cut is marked", Result{Output: bytes.Repeat([]byte("a"), 1000)}, 100, ObsOK, []string{"[result cut at 100 of 1000 bytes]"}, nil},
		{"an executor that stopped reading says so", Result{Output: bytes.Repeat([]byte("a"), 101), Truncated: true, Size: 5000}, 100, ObsOK, []string{"[result cut at 100 of 5000 bytes]"}, nil},
		{"10 MiB of HTML becomes bounded text", Result{Output: bigHTML, ContentType: "text/html; charset=utf-8"}, 4096, ObsOK,
			[]string{"The tool returned an HTML page", "text text", "[result cut at"}, []string{"<div", "var a=1", ".x{}"}},
		{"a sign-in page where data was expected", Result{Output: []byte(`<html><body><form><h1>Sign in</h1><input type=password></form></body></html>`)}, 4096, ObsFailed,
			[]string{"Authentication failed", "retrying unchanged will return the same result"}, []string{"<"}},
		{"HTTP 401", Result{Failure: &Failure{Kind: FailHTTP, Code: 401}, Output: []byte(`{"error":"expired"}`)}, 100, ObsFailed,
			[]string{"Authentication failed (HTTP 401) calling lookup", "retrying unchanged will return the same result"}, nil},
		{"HTTP 403 with an HTML body", Result{Failure: &Failure{Kind: FailHTTP, Code: 403}, Output: []byte("<html><body>Forbidden</body></html>"), ContentType: "text/html"}, 100, ObsFailed,
			[]string{"Access denied (HTTP 403) calling lookup: Forbidden", "retrying unchanged will return the same result"}, []string{"<html"}},
		{"HTTP 403 with the executor's own account", Result{Failure: &Failure{Kind: FailHTTP, Code: 403, Detail: "the service account reader may not list pods in billing"}}, 100, ObsFailed,
			[]string{"Access denied (HTTP 403) calling lookup: the service account reader may not list pods in billing"}, nil},
		{"HTTP 503 can be retried later", Result{Failure: &Failure{Kind: FailHTTP, Code: 503}, Output: []byte("upstream down")}, 100, ObsFailed,
			[]string{"failed (HTTP 503): upstream down", "A retry later may help"}, nil},
		{"HTTP 400 names the body", Result{Failure: &Failure{Kind: FailHTTP, Code: 400}, Output: []byte(`{"error":"from_date must be before to_date"}`)}, 100, ObsFailed,
			[]string{"rejected the request (HTTP 400)", "from_date must be before to_date"}, nil},
		{"deadline", Result{Failure: &Failure{Kind: FailTimeout}}, 100, ObsFailed, []string{"did not finish before its deadline"}, nil},
		{"exit code with a stack trace keeps only the error line", Result{Failure: &Failure{Kind: FailExit, Code: 2,
			Detail: "panic: runtime error: index out of range\n\ngoroutine 1 [running]:\nmain.main()\n\t/src/main.go:12 +0x1d"}}, 100, ObsFailed,
			[]string{"exit code 2: panic: runtime error: index out of range"}, []string{"goroutine", "main.go"}},
		{"unreachable", Result{Failure: &Failure{Kind: FailUnavailable, Detail: "dial tcp 10.0.0.1:80: connection refused"}}, 100, ObsFailed,
			[]string{"could not be reached: dial tcp", "retrying later may help"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			text, status := RenderResult("lookup", tc.max, tc.r)
			if status != tc.status {
				t.Errorf("status = %s, want %s", status, tc.status)
			}
			if !utf8.ValidString(text) {
				t.Errorf("observation is not valid UTF-8")
			}
			if len(text) > tc.max+200 && len(text) > 1200 {
				t.Errorf("observation is %d bytes, not bounded by %d", len(text), tc.max)
			}
			for _, c := range tc.contains {
				if !strings.Contains(text, c) {
					t.Errorf("observation %q does not contain %q", cut(text, 300), c)
				}
			}
			for _, a := range tc.absent {
				if strings.Contains(text, a) {
					t.Errorf("observation %q contains %q", cut(text, 300), a)
				}
			}
		})
	}
}

func TestCanonical(t *testing.T) {
	cases := []struct {
		name, in, want string
		ignore         []string
	}{
		{"keys sorted, spaces dropped", `{ "b": 1, "a": {"d": [1, 2], "c": true} }`, `{"a":{"c":true,"d":[1,2]},"b":1}`, nil},
		{"numbers normalised", `{"a":1.0,"b":1e3,"c":0.50,"d":-0,"e":2.5e-1}`, `{"a":1,"b":1000,"c":0.5,"d":0,"e":0.25}`, nil},
		{"volatile names removed at any depth", `{"q":"x","request_id":"r1","inner":{"request_id":"r2","k":1}}`, `{"inner":{"k":1},"q":"x"}`, []string{"request_id"}},
		{"strings escaped canonically", `{"s":"a\u0041\n"}`, `{"s":"aA\n"}`, nil},
		{"empty arguments", ``, `{}`, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Canonical(json.RawMessage(tc.in), tc.ignore)
			if err != nil {
				t.Fatal(err)
			}
			if string(got) != tc.want {
				t.Fatalf("Canonical(%s) = %s, want %s", tc.in, got, tc.want)
			}
		})
	}
	if _, err := Canonical(json.RawMessage(`{"a":`), nil); err == nil {
		t.Fatal("malformed JSON was accepted")
	}
}

func TestMoney(t *testing.T) {
	for _, tc := range []struct{ in, want string }{{"1", "1.0000"}, {"0.28144", "0.28144"}, {"0.018", "0.0180"}, {"15.000000000001", "15.000000000001"}} {
		m, err := ParseMoney(tc.in)
		if err != nil || m.String() != tc.want {
			t.Errorf("ParseMoney(%q) = %s, %v; want %s", tc.in, m, err, tc.want)
		}
	}
	for _, bad := range []string{"", "-1", "1e3", "1.", ".5", "1,00", "0.0000000000001", "99999999999"} {
		if _, err := ParseMoney(bad); err == nil {
			t.Errorf("ParseMoney(%q) accepted a malformed amount", bad)
		}
	}
	// 0.1 + 0.2 is exactly 0.3, unlike float64.
	if MustMoney("0.1")+MustMoney("0.2") != MustMoney("0.3") {
		t.Error("0.1 + 0.2 != 0.3")
	}
	// Token costs round up to the pico-dollar, never down.
	if got := TokenCost(1, MustMoney("0.0000001")); got != 1 {
		t.Errorf("TokenCost rounds down: %d", got)
	}
	if got := TokenCost(4096, MustMoney("15")); got != MustMoney("0.06144") {
		t.Errorf("TokenCost(4096, 15) = %s", got)
	}
	// Signs, zero and the extremes, and every form reads back.
	for _, tc := range []struct {
		m    Money
		want string
	}{{0, "0.0000"}, {-MustMoney("0.25"), "-0.2500"}, {1, "0.000000000001"}, {-1, "-0.000000000001"},
		{Money(1<<63 - 1), "9223372.036854775807"}, {Money(-1 << 63), "-9223372.036854775808"}, {MustMoney("12.30405"), "12.30405"}} {
		if got := tc.m.String(); got != tc.want {
			t.Errorf("Money(%d).String() = %q, want %q", int64(tc.m), got, tc.want)
		}
		if b, _ := tc.m.AppendText([]byte("$")); string(b) != "$"+tc.want {
			t.Errorf("AppendText = %q, want %q", b, "$"+tc.want)
		}
		var back Money
		if tc.m != Money(-1<<63) { // its magnitude has no positive Money
			if err := back.UnmarshalText([]byte(tc.want)); err != nil || back != tc.m {
				t.Errorf("UnmarshalText(%q) = %d, %v; want %d", tc.want, int64(back), err, int64(tc.m))
			}
		}
	}
	var m Money
	if err := json.Unmarshal([]byte(`"0.5"`), &m); err != nil || m != MustMoney("0.5") {
		t.Errorf("unmarshal: %s %v", m, err)
	}
}

func TestModelCost_pricesCacheReadsAndWritesAtTheirRates(t *testing.T) {
	e, err := New(Config{Goal: "g", Budget: Budget{MaxTurns: 1}, Model: ModelConfig{Pricing: Pricing{
		Input: MustMoney("3"), Output: MustMoney("15"), CachedInput: MustMoney("0.3"), CacheWrite: MustMoney("3.75")}}})
	if err != nil {
		t.Fatal(err)
	}
	// 10,000 input tokens: 6,000 read from the cache, 2,000 written to it, 2,000 plain; 1,000 output.
	got := e.cfg.modelCost(TokenUsage{InputTokens: 10000, CachedInputTokens: 6000, CacheWriteTokens: 2000, OutputTokens: 1000})
	want := MustMoney("0.006") + MustMoney("0.0018") + MustMoney("0.0075") + MustMoney("0.015")
	if got != want {
		t.Fatalf("cost = %s, want %s", got, want)
	}
}
