package modeltest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"runtime"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
)

// hugeReply is the size of the bodies aHugeReplyIsNotRead is sent: more
// than the operator's memory limit (256 MiB in the chart).
const hugeReply = 300 << 20

// aHugeReplyIsNotRead: a 300 MB answer, and a 300 MB error body, from a
// server the run's author chose, end the call once the reply limit
// (model.DefaultMaxReplyBytes) is read. The error says what happened and
// is not transient, the request is not sent again, and the process
// allocates a small multiple of the limit, nothing like the reply.
func aHugeReplyIsNotRead(t *testing.T, p Provider) {
	for _, tc := range []struct {
		name   string
		status int
		want   string
	}{
		{"answer", http.StatusOK, p.Name + ": the reply is larger than 8 MiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"},
		{"error", http.StatusInternalServerError, p.Name + ": the HTTP 500 reply is larger than 8 MiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := p.Fixture(t, nil, Step{Status: tc.status, Body: []byte(`{"text":"`), Size: hugeReply})
			runtime.GC()
			var before, after runtime.MemStats
			runtime.ReadMemStats(&before)
			_, err := f.Model.Complete(context.Background(), p.Request())
			runtime.ReadMemStats(&after)
			allocated := after.TotalAlloc - before.TotalAlloc
			grown := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			t.Logf("a %d MiB reply: %.1f MiB allocated, heap grown by %.1f MiB", hugeReply>>20, float64(allocated)/(1<<20), float64(grown)/(1<<20))

			var pe *model.ProviderError
			if !errors.As(err, &pe) {
				t.Fatalf("got %v, want a *model.ProviderError", err)
			}
			if err.Error() != tc.want {
				t.Errorf("error = %q\nwant    %q", err, tc.want)
			}
			if pe.Status != tc.status || pe.ReplyLimit != model.DefaultMaxReplyBytes {
				t.Errorf("status %d, limit %d; want %d and the default limit", pe.Status, pe.ReplyLimit, tc.status)
			}
			var te loop.TransientError
			if !errors.As(err, &te) || te.Transient() {
				t.Error("the error is transient: the engine would send the request again")
			}
			if n := len(f.Srv.Requests()); n != 1 {
				t.Errorf("the server saw %d requests, want 1", n)
			}
			if allocated > 64<<20 {
				t.Errorf("the call allocated %d MiB for a %d MiB reply; want well under 64 MiB", allocated>>20, hugeReply>>20)
			}
		})
	}
}

// theReplyLimitIsConfigurable: a body of exactly Config.MaxReplyBytes is
// read; one byte less of limit and it is not.
func theReplyLimitIsConfigurable(t *testing.T, p Provider) {
	body := p.file(t, p.Text)
	for _, limit := range []int64{int64(len(body)), int64(len(body)) - 1} {
		f := p.Fixture(t, func(c *model.Config) { c.MaxReplyBytes = limit }, Reply(body))
		got, err := f.Model.Complete(context.Background(), p.Request())
		if limit == int64(len(body)) {
			if err != nil || got.Content == "" {
				t.Errorf("a %d-byte reply at a limit of %d: %v", len(body), limit, err)
			}
			continue
		}
		want := fmt.Sprintf("%s: the reply is larger than %d bytes, the operator's limit for a model reply (--model-max-reply-bytes); it was not read", p.Name, limit)
		if err == nil || err.Error() != want {
			t.Errorf("a %d-byte reply at a limit of %d: got %v, want %q", len(body), limit, err, want)
		}
	}
}
