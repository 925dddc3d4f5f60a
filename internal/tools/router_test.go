package tools

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

// fake is an executor that answers with its output and may preflight.
type fake struct {
	output    string
	preflight error
}

func (f fake) Execute(_ context.Context, inv loop.Invocation) loop.Result {
	return loop.Result{Output: []byte(f.output + " " + string(inv.Arguments))}
}

type preflighting struct{ fake }

func (p preflighting) Preflight(context.Context) error { return p.preflight }

// routed dispatches inv through the router as a run does: ExecuteBatch
// stamps the call id and the duration.
func routed(r *Router, inv loop.Invocation) loop.Result {
	inv.Timeout = time.Second
	return loop.ExecuteBatch(context.Background(), r, []loop.Invocation{inv}, false)[0]
}

func TestRouter_routesByToolName(t *testing.T) {
	r := NewRouter(map[string]loop.Toolbox{
		"identify_account": fake{output: "acct"},
		"find_invoices":    fake{output: "invoices"},
	})
	for tool, want := range map[string]string{
		"identify_account": `acct {"email":"x"}`,
		"find_invoices":    `invoices {"email":"x"}`,
	} {
		res := routed(r, loop.Invocation{CallID: "t1-c1", Tool: tool, Arguments: []byte(`{"email":"x"}`)})
		if res.Failure != nil || string(res.Output) != want || res.CallID != "t1-c1" || res.Duration <= 0 {
			t.Errorf("%s: got %+v, want output %q, call id t1-c1 and a duration", tool, res, want)
		}
	}
	if diff := cmp.Diff([]string{"find_invoices", "identify_account"}, r.Tools()); diff != "" {
		t.Errorf("Tools (-want +got):\n%s", diff)
	}
}

func TestRouter_unknownToolIsInvalidCall(t *testing.T) {
	r := NewRouter(map[string]loop.Toolbox{"identify_account": fake{}})
	res := routed(r, loop.Invocation{CallID: "t1-c2", Tool: "issue_refund"})
	want := &loop.Failure{Kind: loop.FailInvalid, Detail: `unknown tool "issue_refund"`}
	if diff := cmp.Diff(want, res.Failure); diff != "" || res.CallID != "t1-c2" {
		t.Errorf("CallID %q, Failure (-want +got):\n%s", res.CallID, diff)
	}
}

func TestRouter_panickingExecutorYieldsAResult(t *testing.T) {
	r := NewRouter(map[string]loop.Toolbox{"boom": loop.ToolboxFunc(func(context.Context, loop.Invocation) loop.Result {
		panic("nil map")
	})})
	res := routed(r, loop.Invocation{CallID: "t1-c1", Tool: "boom"})
	if res.Failure == nil || res.Failure.Kind != loop.FailUnknown || res.CallID != "t1-c1" {
		t.Errorf("got %+v, want an OutcomeUnknown failure for t1-c1", res)
	}
}

func TestRouter_preflightsEveryExecutorThatCan(t *testing.T) {
	missing := errors.New(`MCP server http://mcp/ does not offer tool "refund"`)
	r := NewRouter(map[string]loop.Toolbox{
		"plain":  fake{},
		"good":   preflighting{fake{}},
		"refund": preflighting{fake{preflight: missing}},
		"search": preflighting{fake{preflight: errors.New("unreachable")}},
	})
	err := r.Preflight(context.Background())
	if !errors.Is(err, missing) {
		t.Errorf("Preflight = %v, want it to wrap the refund error", err)
	}
	want := "tool \"refund\": MCP server http://mcp/ does not offer tool \"refund\"\ntool \"search\": unreachable"
	if err == nil || err.Error() != want {
		t.Errorf("Preflight = %v\nwant %s", err, want)
	}
	ok := NewRouter(map[string]loop.Toolbox{"plain": fake{}, "good": preflighting{fake{}}})
	if err := ok.Preflight(context.Background()); err != nil {
		t.Errorf("Preflight = %v, want nil", err)
	}
}

func TestRouter_isAToolboxAndAPreflighter(t *testing.T) {
	var tb loop.Toolbox = NewRouter(nil)
	if _, ok := tb.(loop.Preflighter); !ok {
		t.Error("Router does not implement loop.Preflighter")
	}
	res := tb.Execute(context.Background(), loop.Invocation{Tool: "x", Timeout: time.Second})
	if res.Failure == nil || res.Failure.Kind != loop.FailInvalid {
		t.Errorf("empty router: %+v, want InvalidCall", res)
	}
}
