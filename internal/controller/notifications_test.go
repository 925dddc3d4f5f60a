package controller

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/notify"
	. "github.com/onsi/gomega"
	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// hook is a notification webhook on loopback that refuses its first
// failures posts and records the messages it accepts.
type hook struct {
	mu       sync.Mutex
	failures int
	posts    int
	got      []notify.Message
	hang     chan struct{} // when set, every post waits on it
	arrived  atomic.Int32  // posts that reached the handler
}

func (h *hook) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	h.arrived.Add(1)
	if h.hang != nil {
		select {
		case <-h.hang:
		case <-r.Context().Done():
		}
		return
	}
	body, _ := io.ReadAll(r.Body)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.posts++
	if h.posts <= h.failures {
		w.WriteHeader(http.StatusBadGateway)
		return
	}
	var m notify.Message
	_ = json.Unmarshal(body, &m)
	h.got = append(h.got, m)
}

func (h *hook) messages() []notify.Message {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]notify.Message(nil), h.got...)
}

func webhookSecret(t *testing.T, ns, name, key, url string) {
	t.Helper()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, StringData: map[string]string{key: url}}
	if err := k8sClient.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
}

// Issue 32, item 3: a call that starts waiting is a Normal event
// ApprovalRequested and a message to the webhook (the operator's, or the
// namespace's own), retried when the webhook fails; a run that ends
// Escalated is a message too; and a webhook that never answers holds up
// no run. The webhook URL is in no event.
func TestNotifications_approvalRequestedAndEscalatedAreAnnounced(t *testing.T) {
	ops, team, quiet := namespace(t), namespace(t), namespace(t)
	main := &hook{failures: 2}
	mainSrv := httptest.NewServer(main)
	defer mainSrv.Close()
	hung := &hook{hang: make(chan struct{})}
	hungSrv := httptest.NewServer(hung)
	defer hungSrv.Close()
	defer close(hung.hang)
	webhookSecret(t, ops, "agentrun-webhook", "url", mainSrv.URL+"/services/T0/B0/secret-token")
	webhookSecret(t, team, notify.NamespaceSecret, notify.NamespaceKey, hungSrv.URL+"/never-answers")

	tb := newTools()
	startWith(t, &kits{tools: tb}, managerSetup{config: func(c *Config) {
		res := &notify.SecretResolver{Reader: c.APIReader, Default: notify.SecretKey{Namespace: ops, Name: "agentrun-webhook", Key: "url"},
			Namespaced: true, Client: &http.Client{}, TenantClient: &http.Client{}}
		n := notify.New(res.Resolve)
		n.Backoff, n.Timeout, n.ConsoleURL = 10*time.Millisecond, 30*time.Second, "http://127.0.0.1:8080"
		c.Notifier = n
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = n.Start(ctx) }()
	}})

	// The operator's webhook, which fails twice before it accepts.
	run := refundRun(quiet, "refund").answer("Refunded.").create(t)
	pending := waitPending(t, run, 1).Status.PendingApprovals[0]
	g := NewWithT(t)
	g.Eventually(main.messages, 20*time.Second, 20*time.Millisecond).Should(HaveLen(1), "the message after its retries")
	m := main.messages()[0]
	if m.Event != notify.EventApprovalRequested || m.Namespace != quiet || m.Run != "refund" || m.CallID != "t1-c1" ||
		m.Tool != "issue_refund" || m.ArgumentsDigest != pending.ArgumentsDigest || m.ArgumentsDigest == "" ||
		m.Inbox != "http://127.0.0.1:8080/inbox?namespace="+quiet || !strings.Contains(m.Text, "t1-c1") {
		t.Errorf("message = %+v", m)
	}
	g.Eventually(func() []string {
		return eventNotes(t, quiet, "AgentRun", "refund", corev1.EventTypeNormal, v1alpha1.ReasonApprovalRequested)
	}, 10*time.Second, 50*time.Millisecond).Should(ConsistOf(And(ContainSubstring("t1-c1"), ContainSubstring("issue_refund"),
		ContainSubstring(pending.ArgumentsDigest), Not(ContainSubstring("secret-token")))))

	// The namespace's own webhook never answers: the run goes on all the same.
	slow := refundRun(team, "refund").answer("Refunded.").create(t)
	waitPending(t, slow, 1)
	g.Eventually(hung.arrived.Load, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 1), "the post that hangs")
	annotate(t, slow, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, slow, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	if main.arrived.Load() > 3 {
		t.Errorf("the operator's webhook got %d posts; the namespace's own should have had the team's", main.arrived.Load())
	}
	g.Eventually(func() []string {
		return eventReasons(t, team, "refund")
	}, 10*time.Second, 50*time.Millisecond).Should(ContainElement(v1alpha1.ReasonApprovalRequested))

	// A run that ends Escalated is announced, while the namespace's
	// hung webhook still holds its post.
	esc := makeRun(quiet, "timeout").writeTool("drop_table", false).calls("drop_table", `{}`).
		with(func(s *v1alpha1.AgentRunSpec) { s.ApprovalTimeout = &metav1.Duration{Duration: time.Second} }).create(t)
	expectOutcome(t, waitOutcome(t, esc, 20*time.Second), v1alpha1.OutcomeEscalated, "approvalTimeout")
	g.Eventually(func() []string {
		var out []string
		for _, m := range main.messages() {
			out = append(out, m.Event+" "+m.Run+" "+m.CallID)
		}
		return out
	}, 10*time.Second, 20*time.Millisecond).Should(ContainElement(notify.EventEscalated+" timeout "), "the Escalated message")
	annotate(t, run, "t1-c1", "approve")
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
}

// Issue 46 item 6: the end of a run whose spec.notify names its outcome is
// a message; one that the webhook did not take before the operator
// stopped is delivered by the next operator, once (the run records it),
// signed so that a receiver that checks the signature takes it, and not
// a forgery.
func TestNotifications_aMessageLeftBeforeARestartIsDeliveredAfterItOnceAndSigned(t *testing.T) {
	ops, ns := namespace(t), namespace(t)
	key := "whsec_" + base64.StdEncoding.EncodeToString([]byte("a-shared-secret-of-32-bytes-long"))
	verifier, err := standardwebhooks.NewWebhook(key)
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu       sync.Mutex
		up       bool
		down     int
		accepted []notify.Message
		refused  int
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		mu.Lock()
		defer mu.Unlock()
		if !up {
			down++
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		if err := verifier.Verify(body, r.Header); err != nil {
			refused++
			w.WriteHeader(http.StatusUnauthorized)
			return
		}
		var m notify.Message
		_ = json.Unmarshal(body, &m)
		accepted = append(accepted, m)
	}))
	defer srv.Close()
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ops, Name: "agentrun-webhook"},
		StringData: map[string]string{"url": srv.URL, notify.SigningKey: key}}
	if err := k8sClient.Create(context.Background(), s); err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)

	// The first operator: the webhook is down when the run ends.
	stop := notifyingOperator(t, ops)
	run := makeRun(ns, "nightly").answer("All done.").with(func(s *v1alpha1.AgentRunSpec) {
		s.Notify = &v1alpha1.NotifySpec{Outcomes: []v1alpha1.Outcome{v1alpha1.OutcomeCompleted, v1alpha1.OutcomeError}}
	}).create(t)
	expectOutcome(t, waitOutcome(t, run, 20*time.Second), v1alpha1.OutcomeCompleted, "final answer")
	g.Eventually(func() int { mu.Lock(); defer mu.Unlock(); return down }, 10*time.Second, 20*time.Millisecond).Should(BeNumerically(">=", 1), "the failed post")
	stop()

	// The next one delivers it, once, however many times it looks again.
	mu.Lock()
	up = true
	mu.Unlock()
	stop = notifyingOperator(t, ops)
	defer stop()
	g.Eventually(func() []notify.Message {
		mu.Lock()
		defer mu.Unlock()
		return append([]notify.Message(nil), accepted...)
	},
		20*time.Second, 20*time.Millisecond).Should(HaveLen(1), "the message after the restart")
	m := accepted[0]
	if m.Event != notify.EventFinished || m.Outcome != string(v1alpha1.OutcomeCompleted) || m.ID != string(run.UID)+"/"+notify.EventFinished || m.Run != "nightly" {
		t.Errorf("message = %+v", m)
	}
	g.Eventually(func() string {
		got := &v1alpha1.AgentRun{}
		_ = k8sClient.Get(context.Background(), client.ObjectKeyFromObject(run), got)
		return got.Annotations[v1alpha1.AnnotationNotified]
	}, 10*time.Second, 20*time.Millisecond).Should(Equal(notify.EventFinished))
	g.Consistently(func() int { mu.Lock(); defer mu.Unlock(); return len(accepted) + refused }, time.Second, 50*time.Millisecond).Should(Equal(1),
		"deliveries after the run recorded it, over ten rescans")

	// A post signed with another secret is refused by the same receiver.
	forged, _ := standardwebhooks.NewWebhook("whsec_" + base64.StdEncoding.EncodeToString([]byte("not-the-shared-secret-at-all....")))
	body, _ := json.Marshal(notify.Message{ID: "forged", Event: notify.EventFinished, Run: "nightly"})
	sig, _ := forged.Sign("forged", time.Now(), body)
	req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(string(body)))
	req.Header.Set(standardwebhooks.HeaderWebhookID, "forged")
	req.Header.Set(standardwebhooks.HeaderWebhookTimestamp, strconv.FormatInt(time.Now().Unix(), 10))
	req.Header.Set(standardwebhooks.HeaderWebhookSignature, sig)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusUnauthorized {
		t.Errorf("a forged delivery got HTTP %d", resp.StatusCode)
	}
}
