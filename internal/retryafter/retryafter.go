// Package retryafter reads how long an HTTP server asked a client to wait
// before trying again, for the model providers and the http tool alike.
package retryafter

import (
	"math"
	"net/http"
	"strconv"
	"time"
)

// Max bounds what Parse returns: a server asking for more is asking for
// longer than any run's wall clock.
const Max = 24 * time.Hour

// Parse returns the wait a response asks for, in the forms servers and
// the model SDKs use: Retry-After-Ms (milliseconds), then Retry-After in
// seconds or as an HTTP date (RFC 9110, section 10.2.3), measured from
// now. ok is false when the response says nothing usable; a date in the
// past is a wait of zero; the result never exceeds Max.
func Parse(h http.Header, now time.Time) (wait time.Duration, ok bool) {
	// In seconds, as a float: a huge value must not overflow a Duration.
	secs := 0.0
	if v := h.Get("Retry-After-Ms"); v != "" {
		if ms, err := strconv.ParseFloat(v, 64); err == nil {
			secs, ok = ms/1000, true
		}
	}
	if v := h.Get("Retry-After"); !ok && v != "" {
		if s, err := strconv.ParseFloat(v, 64); err == nil {
			secs, ok = s, true
		} else if t, err := http.ParseTime(v); err == nil {
			secs, ok = t.Sub(now).Seconds(), true
		}
	}
	if !ok || math.IsNaN(secs) {
		return 0, false
	}
	secs = max(0, min(secs, Max.Seconds()))
	return time.Duration(secs * float64(time.Second)), true
}
