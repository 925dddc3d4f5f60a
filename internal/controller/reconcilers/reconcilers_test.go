package reconcilers

import (
	"testing"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// Unset, the clock is time.Now and the uncached reader the client; set,
// both are kept.
func TestDefaulted(t *testing.T) {
	c, other := fake.NewClientBuilder().Build(), fake.NewClientBuilder().Build()
	at := time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		name       string
		in         Base
		wantReader client.Reader
		wantNow    func(time.Time) bool
	}{
		{"unset", Base{Client: c}, c, func(got time.Time) bool { return time.Since(got) < time.Minute }},
		{"set", Base{Client: c, APIReader: other, Clock: func() time.Time { return at }}, other, func(got time.Time) bool { return got.Equal(at) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := tc.in.Defaulted()
			if got.APIReader != tc.wantReader {
				t.Errorf("APIReader = %p, want %p", got.APIReader, tc.wantReader)
			}
			if got.Clock == nil || !tc.wantNow(got.Clock()) {
				t.Errorf("Clock is not the one wanted")
			}
			if got.Client != c {
				t.Errorf("Client changed")
			}
		})
	}
}
