package retryafter

import (
	"net/http"
	"testing"
	"time"
)

func TestParse(t *testing.T) {
	now := time.Date(2026, 8, 14, 10, 7, 0, 0, time.UTC)
	for _, c := range []struct {
		name   string
		header http.Header
		want   time.Duration
		ok     bool
	}{
		{"seconds", http.Header{"Retry-After": {"7"}}, 7 * time.Second, true},
		{"http date", http.Header{"Retry-After": {now.Add(90 * time.Second).Format(http.TimeFormat)}}, 90 * time.Second, true},
		{"date in the past", http.Header{"Retry-After": {now.Add(-time.Hour).Format(http.TimeFormat)}}, 0, true},
		{"milliseconds first", http.Header{"Retry-After-Ms": {"1500"}, "Retry-After": {"9"}}, 1500 * time.Millisecond, true},
		{"huge is capped", http.Header{"Retry-After": {"1e300"}}, Max, true},
		{"negative is zero", http.Header{"Retry-After": {"-5"}}, 0, true},
		{"garbage", http.Header{"Retry-After": {"soon"}}, 0, false},
		{"NaN", http.Header{"Retry-After": {"NaN"}}, 0, false},
		{"absent", http.Header{}, 0, false},
	} {
		got, ok := Parse(c.header, now)
		if got != c.want || ok != c.ok {
			t.Errorf("%s: Parse = %s, %v; want %s, %v", c.name, got, ok, c.want, c.ok)
		}
	}
}
