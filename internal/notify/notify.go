// Package notify tells people that a run waits for them: it posts a small
// JSON message (Slack-compatible "text", plus the run, the call, the tool,
// the arguments' digest and a link to the console's inbox) to a webhook
// when a call starts waiting for approval and when a run ends Escalated.
//
// Delivery is off the reconcile: Notify only queues the message (a full
// queue drops it, counted), and a few workers post it, retrying a failed
// post a bounded number of times with backoff. A run is never held up by
// its notification. The webhook URL is a secret (a Slack webhook URL is
// its own credential): it is read from a Secret at each delivery and is
// never logged, nor put in an event or status; errors are reported
// without it.
package notify

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
)

// Events a message is sent for.
const (
	EventApprovalRequested = "ApprovalRequested"
	EventEscalated         = "Escalated"
	// EventFinished is a run's end with an outcome its spec.notify asks
	// to be told of (other than Escalated, which is always told).
	EventFinished = "Finished"
)

// Message is the JSON body posted to the webhook. Text is what a Slack
// incoming webhook shows: plain text, which the Notifier escapes for the
// chat's markup when it posts (Escape). The other fields are for receivers
// that route or render messages themselves, as written: such a receiver
// escapes what it renders.
type Message struct {
	// ID names the message for good: the same for every delivery of it,
	// also after an operator restart. It is the Standard Webhooks
	// webhook-id, by which a receiver drops a message it already has.
	ID              string `json:"id"`
	Text            string `json:"text"`
	Event           string `json:"event"`
	Namespace       string `json:"namespace"`
	Run             string `json:"run"`
	CallID          string `json:"callID,omitempty"`
	Tool            string `json:"tool,omitempty"`
	ArgumentsDigest string `json:"argumentsDigest,omitempty"`
	Rule            string `json:"rule,omitempty"`
	Outcome         string `json:"outcome,omitempty"`
	Reason          string `json:"reason,omitempty"`
	// Owner is who owns an Escalated run's escalation
	// (status.escalation.owner); empty for none, and for other events.
	Owner string `json:"owner,omitempty"`
	Inbox string `json:"inbox,omitempty"`
}

// Target is where one namespace's messages go: the webhook URL and the
// client that posts to it. An empty URL sends nothing.
type Target struct {
	URL    string
	Client *http.Client
	// Signer, when set, signs every delivery with Standard Webhooks'
	// headers (webhook-id, webhook-timestamp, webhook-signature).
	Signer *standardwebhooks.Webhook
}

// Resolver finds the webhook of a namespace at delivery time (the Secret
// may change, or be created, after the operator started).
type Resolver func(ctx context.Context, namespace string) (Target, error)

// Notifier queues messages and delivers them. Build it with New and run
// Start (a controller-runtime Runnable).
type Notifier struct {
	resolve Resolver
	// Attempts is how many times a message is posted before it is given
	// up; Backoff the wait before the first retry, doubled for each next
	// one up to MaxBackoff; Timeout bounds each post.
	Attempts            int
	Backoff, MaxBackoff time.Duration
	Timeout             time.Duration
	// ConsoleURL is the console's base URL; each message links to its
	// inbox (ConsoleURL + "/inbox?namespace=NS"). Empty: no link.
	ConsoleURL string
	Log        logr.Logger
	// Delivered, when set, is told of each message a webhook accepted,
	// so that it is not sent again (the operator records it on the run).
	// Its error is logged: the message may then be sent again, with the
	// same ID.
	Delivered func(ctx context.Context, m Message) error
	// Pending, when set, gives the messages that are due and not yet
	// delivered, which the notifier queues when it starts and every
	// Rescan after: what a restart, a full queue or a webhook that stayed
	// down left undelivered is sent then.
	Pending func(ctx context.Context) ([]Message, error)
	Rescan  time.Duration
	// Now is time.Now unless a test sets it.
	Now func() time.Time

	queue chan Message
	// busy holds the IDs of the messages queued or being delivered, so
	// that a message queued again meanwhile is not sent twice.
	mu   sync.Mutex
	busy map[string]bool
	// accepted holds the IDs of the messages a webhook accepted, with the
	// rescan they were accepted in, until a rescan listed after that no
	// longer gives them: Pending reads the runs from a cache that shows a
	// delivery's record a moment later, and would give the message again.
	accepted map[string]uint64
	rescans  uint64
	// deliveries counts what became of each message, by result:
	// delivered, retried (an attempt failed and is tried again), failed
	// (every attempt failed: the message is given up), dropped (the queue
	// was full, or the webhook could not be resolved). The operator
	// serves it (Collectors).
	deliveries *prometheus.CounterVec
}

// QueueSize bounds the messages waiting for delivery.
const QueueSize = 256

// chatMarkup escapes the three characters that Slack's message formatting
// reads as markup, as it documents
// (https://api.slack.com/reference/surfaces/formatting#escaping).
var chatMarkup = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape returns s as a Slack-compatible chat shows it, character for
// character: a run's reason, tool name or model-written text can then
// neither mention everyone (<!channel>, <!here>, <@U123>) nor show a link
// under other words (<https://evil.example|the invoice>).
func Escape(s string) string { return chatMarkup.Replace(s) }

// New returns a Notifier with the defaults: 5 attempts, 1s backoff doubled
// up to 30s, 10s per post.
func New(resolve Resolver) *Notifier {
	return &Notifier{resolve: resolve, Attempts: 5, Backoff: time.Second, MaxBackoff: 30 * time.Second,
		Timeout: 10 * time.Second, Log: logr.Discard(), queue: make(chan Message, QueueSize), busy: map[string]bool{}, accepted: map[string]uint64{},
		Rescan: 10 * time.Minute, Now: time.Now,
		deliveries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: "agentrun", Name: "notification_deliveries_total",
			Help: "Notification webhook deliveries, by result: delivered, retried (an attempt failed and is tried again), failed (every attempt failed, the message is given up), dropped (the queue was full or the webhook could not be read).",
		}, []string{"result"})}
}

// Collectors is the notifier's counter of deliveries
// (agentrun_notification_deliveries_total), for the operator to register
// with the rest it serves. A nil Notifier has none.
func (n *Notifier) Collectors() []prometheus.Collector {
	if n == nil {
		return nil
	}
	return []prometheus.Collector{n.deliveries}
}

// Notify queues m for delivery and returns at once; a full queue drops it
// (Pending gives it again later). A message whose ID is queued, being
// delivered or accepted (and not read back as recorded yet) is not queued
// again.
func (n *Notifier) Notify(m Message) {
	if n == nil {
		return
	}
	if n.ConsoleURL != "" && m.Inbox == "" {
		m.Inbox = n.ConsoleURL + "/inbox?namespace=" + url.QueryEscape(m.Namespace)
	}
	if m.ID != "" {
		n.mu.Lock()
		_, accepted := n.accepted[m.ID]
		busy := n.busy[m.ID]
		if !accepted {
			n.busy[m.ID] = true
		}
		n.mu.Unlock()
		if busy || accepted {
			return
		}
	}
	select {
	case n.queue <- m:
	default:
		n.done(m)
		n.deliveries.WithLabelValues("dropped").Inc()
		n.Log.Info("Notification dropped: the queue is full", "event", m.Event, "namespace", m.Namespace, "run", m.Run, "callID", m.CallID)
	}
}

// Parallel bounds the deliveries in flight: a webhook that does not
// answer delays only the messages past that many.
const Parallel = 8

// done forgets that m is queued or being delivered.
func (n *Notifier) done(m Message) {
	if m.ID != "" {
		n.mu.Lock()
		delete(n.busy, m.ID)
		n.mu.Unlock()
	}
}

// Start delivers queued messages until ctx ends, Parallel at a time, and
// queues the Pending ones at once and every Rescan.
func (n *Notifier) Start(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	slots := make(chan struct{}, Parallel)
	var rescan <-chan time.Time
	if n.Pending != nil {
		n.queuePending(ctx)
		t := time.NewTicker(n.Rescan)
		defer t.Stop()
		rescan = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-rescan:
			n.queuePending(ctx)
		case m := <-n.queue:
			select {
			case slots <- struct{}{}:
			case <-ctx.Done():
				return nil
			}
			wg.Add(1)
			go func() {
				defer func() { <-slots; wg.Done(); n.done(m) }()
				n.deliver(ctx, m)
			}()
		}
	}
}

// queuePending queues what Pending says is due and undelivered, and
// forgets the messages accepted before it listed that it no longer gives
// (their record is read back).
func (n *Notifier) queuePending(ctx context.Context) {
	n.mu.Lock()
	n.rescans++
	this := n.rescans
	n.mu.Unlock()
	ms, err := n.Pending(ctx)
	if err != nil {
		n.Log.Error(err, "The notifications due could not be listed; they are listed again later")
	} else {
		due := map[string]bool{}
		for _, m := range ms {
			due[m.ID] = true
		}
		n.mu.Lock()
		for id, at := range n.accepted {
			if at < this && !due[id] {
				delete(n.accepted, id)
			}
		}
		n.mu.Unlock()
	}
	for _, m := range ms {
		n.Notify(m)
	}
}

// NeedLeaderElection: every replica's reconciles notify only for runs it
// drives, so each delivers its own.
func (n *Notifier) NeedLeaderElection() bool { return false }

func (n *Notifier) deliver(ctx context.Context, m Message) {
	log := n.Log.WithValues("event", m.Event, "namespace", m.Namespace, "run", m.Run, "callID", m.CallID)
	t, err := n.resolve(ctx, m.Namespace)
	if err != nil {
		n.deliveries.WithLabelValues("dropped").Inc()
		log.Error(err, "Notification not sent: its webhook could not be read")
		return
	}
	if t.URL == "" {
		return
	}
	if t.Client == nil {
		t.Client = http.DefaultClient
	}
	m.Text = Escape(m.Text)
	body, err := json.Marshal(m)
	if err != nil {
		return
	}
	wait := n.Backoff
	for attempt := 1; ; attempt++ {
		err := n.post(ctx, t, m.ID, body)
		if err == nil {
			n.deliveries.WithLabelValues("delivered").Inc()
			if m.ID != "" && n.Pending != nil {
				n.mu.Lock()
				n.accepted[m.ID] = n.rescans
				n.mu.Unlock()
			}
			if n.Delivered != nil {
				if err := n.Delivered(ctx, m); err != nil {
					log.Error(err, "A delivered notification could not be recorded; it may be sent again, with the same id")
				}
			}
			return
		}
		if attempt >= n.Attempts || ctx.Err() != nil {
			n.deliveries.WithLabelValues("failed").Inc()
			log.Error(err, "Notification not delivered; giving up", "attempts", attempt)
			return
		}
		n.deliveries.WithLabelValues("retried").Inc()
		log.V(1).Info("Notification delivery failed; retrying", "attempt", attempt, "error", err.Error(), "after", wait.String())
		select {
		case <-ctx.Done():
			n.deliveries.WithLabelValues("failed").Inc()
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, n.MaxBackoff)
	}
}

// post sends body once. Its error never carries the URL: a webhook URL is
// a credential, and url.Error prints it whole.
func (n *Notifier) post(ctx context.Context, t Target, id string, body []byte) error {
	ctx, cancel := context.WithTimeout(ctx, n.Timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, t.URL, bytes.NewReader(body))
	if err != nil {
		return errors.New("the webhook URL is not a valid URL")
	}
	req.Header.Set("Content-Type", "application/json")
	if t.Signer != nil {
		// Standard Webhooks: the signature covers the id, the time and
		// the body, so a receiver that checks it refuses a forged or
		// altered message, and one replayed later than its tolerance.
		now := n.Now()
		sig, err := t.Signer.Sign(id, now, body)
		if err != nil {
			return errors.New("the delivery could not be signed")
		}
		req.Header.Set(standardwebhooks.HeaderWebhookID, id)
		req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(now.Unix(), 10))
		req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	}
	resp, err := t.Client.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return fmt.Errorf("posting to the webhook: %w", ue.Err)
		}
		return errors.New("posting to the webhook failed")
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("the webhook answered %s", resp.Status)
	}
	return nil
}
