package controller

import (
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// sizingClient records the size of the object each status write leaves,
// as the API server returns it (managed fields included).
type sizingClient struct {
	client.Client
	mu      sync.Mutex
	largest int
	writes  int
}

func (c *sizingClient) Status() client.SubResourceWriter {
	return sizingStatus{SubResourceWriter: c.Client.Status(), c: c}
}

func (c *sizingClient) record(o client.Object) {
	raw, err := json.Marshal(o)
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.writes++
	c.largest = max(c.largest, len(raw))
}

type sizingStatus struct {
	client.SubResourceWriter
	c *sizingClient
}

func (s sizingStatus) Patch(ctx context.Context, o client.Object, p client.Patch, opts ...client.SubResourcePatchOption) error {
	err := s.SubResourceWriter.Patch(ctx, o, p, opts...)
	if err == nil {
		s.c.record(o)
	}
	return err
}

func (s sizingStatus) Update(ctx context.Context, o client.Object, opts ...client.SubResourceUpdateOption) error {
	err := s.SubResourceWriter.Update(ctx, o, opts...)
	if err == nil {
		s.c.record(o)
	}
	return err
}

// lookupModel calls lookup with new arguments on every turn until turn n,
// then answers.
type lookupModel struct{ n int }

func (m lookupModel) Complete(_ context.Context, req *loop.Request) (*loop.Reply, error) {
	turn, u := turnOf(req), loop.TokenUsage{InputTokens: 10, OutputTokens: 1}
	if turn >= m.n {
		return &loop.Reply{Content: "done", Usage: u}, nil
	}
	args := fmt.Sprintf(`{"account":"acct_4b71c9e20d8af315","page":%d,"query":"invoices between two dates, newest first"}`, turn)
	return &loop.Reply{ToolCalls: []loop.ToolCall{{ID: fmt.Sprintf("c%d", turn), Name: "lookup", Arguments: json.RawMessage(args)}}, Usage: u}, nil
}

// Issue 13, item 7: a 1,000-turn run with loopDetection.window 1000 keeps
// the object under 32 KiB at every status write (it reached 64 KB when the
// window was saved as full signatures), and still completes.
func TestRun_aThousandTurnsWithAWindowOfAThousandStayUnder32KiB(t *testing.T) {
	const turns = 1000
	ns := namespace(t)
	var sizing *sizingClient
	startWith(t, &kits{tools: newTools(), model: lookupModel{n: turns}}, managerSetup{
		config: statusAtEverySave, // the object's size at every save
		wrap: func(c client.Client, _ func()) client.Client {
			sizing = &sizingClient{Client: c}
			return sizing
		},
	})
	run := makeRun(ns, "long").readTool("lookup").maxTurns(turns).budget(func(b *v1alpha1.BudgetSpec) {
		b.MaxTokens = ptr64(100_000_000)
		b.MaxToolCalls = ptr.To(int32(turns))
		b.DefaultToolLimit = ptr.To(int32(turns))
		b.MaxWallClock = &metav1.Duration{Duration: time.Hour}
	}).r
	run.Spec.LoopDetection = &v1alpha1.LoopDetectionSpec{Window: ptr.To(int32(1000))}
	run.Spec.Model.Script = []v1alpha1.ScriptStep{{Content: "unused: the test's model answers"}}
	if err := k8sClient.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	done := waitOutcome(t, run, 8*time.Minute)
	expectOutcome(t, done, v1alpha1.OutcomeCompleted, "")
	if done.Status.Turn != turns {
		t.Fatalf("turn = %d, want %d", done.Status.Turn, turns)
	}
	sizing.mu.Lock()
	defer sizing.mu.Unlock()
	t.Logf("%d status writes, the largest object %d bytes", sizing.writes, sizing.largest)
	if sizing.writes < turns {
		t.Fatalf("only %d status writes were seen", sizing.writes)
	}
	if sizing.largest > 32<<10 {
		t.Fatalf("a status write left an object of %d bytes, want at most 32 KiB", sizing.largest)
	}
}

// Status is one managed field: the API server tracks f:status for the
// operator's writes rather than every counter, condition and checkpoint
// key (which took half of a mid-run object's bytes and changed on every
// write, so every status patch re-encoded them; issue 13, item 1).
func TestStatus_isOneManagedField(t *testing.T) {
	ns := namespace(t)
	startManager(t, &kits{tools: newTools()})
	run := makeRun(ns, "fields").readTool("lookup").calls("lookup", `{"q":1}`).answer("Done.").create(t)
	var cur *v1alpha1.AgentRun
	NewWithT(t).Eventually(func() v1alpha1.Outcome { cur = get(t, run); return cur.Status.Outcome }, 30*time.Second, 20*time.Millisecond).
		Should(Equal(v1alpha1.OutcomeCompleted))
	found := false
	for _, e := range cur.ManagedFields {
		if e.Subresource != "status" {
			continue
		}
		found = true
		if e.FieldsV1 == nil || e.FieldsV1.GetRawString() != `{"f:status":{}}` {
			t.Errorf("the status writes of %s manage %s, want only f:status", e.Manager, e.FieldsV1)
		}
	}
	if !found {
		t.Fatalf("no managed fields entry for the status subresource: %+v", cur.ManagedFields)
	}
}
