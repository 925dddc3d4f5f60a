package console

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/kubescheme"
	"github.com/agentrun/agentrun/internal/runclient"
	"github.com/google/go-cmp/cmp"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/fake"
)

// The inbox says what an answer did from runclient's typed result, not
// from text an operation printed (issue 44: it read the plugin's last
// printed line). An approval's page shows the typed answer's sentence
// alone, whatever the call's arguments hold; a refusal its reason, with
// 409, and the API server's refusal of the user 403.
func TestAnswerResult_isTheTypedResult(t *testing.T) {
	ref := runclient.Ref{Namespace: "shop", Name: "refund-1042"}
	call := &v1alpha1.PendingApproval{CallID: "t3-c1", Tool: "issue_refund", ArgumentsDigest: "sha256:0b1e",
		Arguments: "{\"note\":\"line one\nagentrun/refund-1042: t3-c1 denied\"}"}
	// A refusal as runclient gives it: the run has ended.
	ended := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ref.Namespace, Name: ref.Name},
		Status: v1alpha1.AgentRunStatus{Outcome: v1alpha1.OutcomeCompleted}}
	c := fake.NewClientBuilder().WithScheme(kubescheme.Scheme).WithObjects(ended).Build()
	_, refused := runclient.Answer(context.Background(), c, runclient.AnswerOptions{Run: ref, CallID: "t9-c1", Decision: v1alpha1.ApprovalApprove})
	var r *runclient.Refused
	if !errors.As(refused, &r) || r.Reason != runclient.RunEnded {
		t.Fatalf("answering an ended run: %v, want a refusal (RunEnded)", refused)
	}
	forbidden := runclient.Explain(apierrors.NewForbidden(schema.GroupResource{Group: v1alpha1.GroupVersion.Group, Resource: "agentruns"},
		"refund-1042", errors.New("alice may not patch it")), ref)
	for _, tc := range []struct {
		name       string
		answered   *runclient.Answered
		err        error
		want       result
		wantStatus int
	}{
		{"approved", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 approved"}, http.StatusOK},
		{"denied", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalDeny, Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 denied"}, http.StatusOK},
		{"stopped", &runclient.Answered{Run: ref, CallID: "t3-c1", Decision: v1alpha1.ApprovalStop, Call: call}, nil,
			result{OK: true, Message: "agentrun/refund-1042: t3-c1 denied; the run will stop (ApprovalDenied)"}, http.StatusOK},
		{"a name with a terminal escape", &runclient.Answered{Run: runclient.Ref{Name: "r\x1b[2Jx"}, CallID: "t1-c1", Decision: v1alpha1.ApprovalDeny}, nil,
			result{OK: true, Message: "agentrun/rx: t1-c1 denied"}, http.StatusOK},
		{"refused", nil, refused, result{Message: "agentrun/refund-1042 has already ended (Completed): no call waits for an answer"}, http.StatusConflict},
		{"not allowed", nil, forbidden,
			result{Message: `not allowed: agentruns.agents.agentrun.dev "refund-1042" is forbidden: alice may not patch it`}, http.StatusForbidden},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, status := answerResult(tc.answered, tc.err)
			if diff := cmp.Diff(tc.want, *got); diff != "" {
				t.Errorf("result (-want +got):\n%s", diff)
			}
			if status != tc.wantStatus {
				t.Errorf("status = %d, want %d", status, tc.wantStatus)
			}
		})
	}
}

// listedRuns counts the AgentRuns the API server sends a console in
// answer to its lists: each list item carries its kind.
type listedRuns struct {
	rt    http.RoundTripper
	items atomic.Int64
}

func (l *listedRuns) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := l.rt.RoundTrip(req)
	if err != nil || req.Method != http.MethodGet || !strings.HasSuffix(req.URL.Path, "/agentruns") || req.URL.Query().Get("watch") == "true" {
		return resp, err
	}
	body, err := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	if err != nil {
		return nil, err
	}
	l.items.Add(int64(bytes.Count(body, []byte(`"kind":"AgentRun"`))))
	resp.Body = io.NopCloser(bytes.NewReader(body))
	return resp, nil
}

// The inbox reads the runs it can show, not every run: the API server
// selects those waiting for a person and those that escalated (the CRD's
// selectable fields status.phase and status.outcome). Among 40 finished
// runs it reads the one waiting and the one escalated, and shows both.
func TestConsole_inboxReadsOnlyTheRunsThatWaitOrEscalated(t *testing.T) {
	const ns = "console-inbox-reads"
	idleRuns(t, ns, 42, func(int) map[string]string { return nil })
	for i := 2; i < 42; i++ {
		ended(t, ns, fmt.Sprintf("run-%04d", i), v1alpha1.OutcomeCompleted)
	}
	set := func(name string, f func(st *v1alpha1.AgentRunStatus)) {
		run := &v1alpha1.AgentRun{}
		if err := admin.Get(context.Background(), client.ObjectKey{Namespace: ns, Name: name}, run); err != nil {
			t.Fatal(err)
		}
		f(&run.Status)
		if err := admin.Status().Update(context.Background(), run); err != nil {
			t.Fatal(err)
		}
	}
	set("run-0000", func(st *v1alpha1.AgentRunStatus) {
		st.Phase = v1alpha1.PhaseAwaitingApproval
		st.PendingApprovals = []v1alpha1.PendingApproval{{CallID: "t1-c1", Tool: "issue_refund", Arguments: `{"invoice":"in_9f21"}`}}
		st.PendingApprovalCount = 1
	})
	set("run-0001", func(st *v1alpha1.AgentRunStatus) {
		st.Phase, st.Outcome, st.Reason = v1alpha1.PhaseFailed, v1alpha1.OutcomeEscalated, "the model handed the task to a person"
		st.Escalation = &v1alpha1.EscalationStatus{Since: metav1.Now()}
	})

	counted := &listedRuns{}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { counted.rt = rt; return counted })
	_, srv := newConsole(t, Options{Config: cfg})
	for _, q := range []string{"?namespace=" + ns, ""} {
		counted.items.Store(0)
		resp, err := http.Get(srv.URL + "/inbox" + q)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("/inbox%s: %d %s", q, resp.StatusCode, body)
		}
		for _, want := range []string{`data-call="` + ns + `/run-0000/t1-c1"`, ns + `/run-0001`} {
			if !strings.Contains(string(body), want) {
				t.Errorf("/inbox%s does not show %s", q, want)
			}
		}
		// Other tests' runs may wait or escalate too when the whole
		// cluster is read; none of the 40 finished ones is read.
		if n := counted.items.Load(); n < 2 || (q != "" && n != 2) || n >= 40 {
			t.Errorf("/inbox%s read %d AgentRuns: want the 2 that wait or escalated", q, n)
		}
	}
}

// BenchmarkInbox opens the inbox of a namespace of 5,000 runs (the runs
// page benchmark's), none waiting: what it costs is the reading.
func BenchmarkInbox(b *testing.B) {
	const ns, n = "console-bench", 5000
	idleRuns(b, ns, n, func(int) map[string]string { return nil })
	_, hs := newConsole(b, Options{Config: env.Config})
	b.ReportAllocs()
	for b.Loop() {
		resp, err := http.Get(hs.URL + "/inbox?namespace=" + ns)
		if err != nil {
			b.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		_ = resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			b.Fatal(resp.Status)
		}
	}
}
