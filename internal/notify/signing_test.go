package notify

import (
	"context"
	"encoding/base64"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// verifying is a webhook that checks the Standard Webhooks signature of
// every post, as the docs show a receiver doing, and keeps the ids of the
// ones it accepted.
type verifying struct {
	wh       *standardwebhooks.Webhook
	mu       sync.Mutex
	accepted []string
	refused  int
}

func (v *verifying) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	v.mu.Lock()
	defer v.mu.Unlock()
	if err := v.wh.Verify(body, r.Header); err != nil {
		v.refused++
		http.Error(w, err.Error(), http.StatusUnauthorized)
		return
	}
	v.accepted = append(v.accepted, r.Header.Get(standardwebhooks.HeaderWebhookID))
}

func (v *verifying) counts() ([]string, int) {
	v.mu.Lock()
	defer v.mu.Unlock()
	return append([]string(nil), v.accepted...), v.refused
}

func secret(b byte) string {
	return "whsec_" + base64.StdEncoding.EncodeToString([]byte{b, b, b, b, b, b, b, b, b, b, b, b, b, b, b, b})
}

// A delivery signed with the shared secret is accepted by a receiver that
// checks it; one signed with another secret (a forgery) is refused, and
// so is one with no signature.
func TestNotifier_signedDeliveriesVerifyAndForgeriesDoNot(t *testing.T) {
	key, err := standardwebhooks.NewWebhook(secret(7))
	if err != nil {
		t.Fatal(err)
	}
	rcv := &verifying{wh: key}
	srv := httptest.NewServer(rcv)
	defer srv.Close()
	forged, _ := standardwebhooks.NewWebhook(secret(9))
	for i, signer := range []*standardwebhooks.Webhook{key, forged, nil} {
		n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL, Signer: signer}, nil })
		n.Attempts = 1
		start(t, n)
		n.Notify(Message{ID: "uid-1.Escalated." + string(rune('a'+i)), Event: EventEscalated, Namespace: "billing", Run: "refund", Text: "ended Escalated"})
		waitFor(t, "the delivery", func() bool { a, r := rcv.counts(); return len(a)+r == i+1 })
	}
	accepted, refused := rcv.counts()
	if len(accepted) != 1 || accepted[0] != "uid-1.Escalated.a" || refused != 2 {
		t.Fatalf("accepted %q, refused %d; want the signed one only, by its id", accepted, refused)
	}
}

// A message queued while the same one (by ID) waits or is being delivered
// is sent once; the pending ones are queued when the notifier starts, and
// each one the webhook accepted is recorded as delivered.
func TestNotifier_pendingMessagesAreSentOnceAndRecorded(t *testing.T) {
	rcv := &receiver{}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		<-release
		rcv.ServeHTTP(w, r)
	}))
	defer srv.Close()
	var mu sync.Mutex
	var recorded []string
	n := New(func(context.Context, string) (Target, error) { return Target{URL: srv.URL}, nil })
	m := Message{ID: "uid-2.ApprovalRequested.t1-c1", Event: EventApprovalRequested, Namespace: "billing", Run: "refund", CallID: "t1-c1"}
	n.Pending = func(context.Context) ([]Message, error) { return []Message{m}, nil }
	n.Delivered = func(_ context.Context, d Message) error {
		mu.Lock()
		defer mu.Unlock()
		recorded = append(recorded, d.ID)
		return nil
	}
	n.Now = func() time.Time { return time.Unix(1_765_000_000, 0) }
	start(t, n)
	n.Notify(m) // the same message, while the pending one is in flight
	n.Notify(m)
	close(release)
	waitFor(t, "the delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(recorded) == 1 })
	// A later, new message still goes.
	n.Notify(Message{ID: "uid-2.Finished", Event: EventFinished, Namespace: "billing", Run: "refund"})
	waitFor(t, "the second delivery", func() bool { mu.Lock(); defer mu.Unlock(); return len(recorded) == 2 })
	if got, posts := rcv.messages(); posts != 2 || got[0].ID != m.ID {
		t.Fatalf("%d posts (%+v); want 2, the first the pending message", posts, got)
	}
}
