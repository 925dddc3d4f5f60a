package agent

import (
	"encoding/json"
	"fmt"
	"sort"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/clip"
	"github.com/agentrun/agentrun/internal/loop"
)

// Report is a call's result: what its child ended with. It is JSON the
// model reads, bounded by the tool's maxResultBytes: the child's answer
// (or an output too large to fit, as text) is cut to fit, and the rest
// is escaped by encoding/json, so an answer that holds markup, is not
// JSON or is not UTF-8 stays one readable string.
type Report struct {
	// Run is the child's name.
	Run     string `json:"run"`
	Outcome string `json:"outcome"`
	Reason  string `json:"reason,omitempty"`
	// Output is the child's status.output (a run with spec.output).
	Output json.RawMessage `json:"output,omitempty"`
	// Answer is the child's final answer, when it has no output.
	Answer string `json:"answer,omitempty"`
	// Usage is what the child used, as its status says.
	Usage *ReportUsage `json:"usage,omitempty"`
}

// ReportUsage is what a child used.
type ReportUsage struct {
	Turns            int32  `json:"turns"`
	Tokens           int64  `json:"tokens"`
	CostUSD          string `json:"costUSD"`
	ToolCalls        int32  `json:"toolCalls"`
	WallClockSeconds int64  `json:"wallClockSeconds"`
}

// cutMark ends a cut answer.
const cutMark = " [cut: the answer was longer]"

// report is the call's result for child run as it stands, with outcome.
func (e *Executor) report(inv loop.Invocation, name string, run *v1alpha1.AgentRun, outcome string) []byte {
	st := &run.Status
	r := Report{Run: name, Outcome: outcome, Reason: loop.ClipDetail(st.Reason), Answer: st.Answer}
	if st.Output != nil && json.Valid(st.Output.Raw) {
		r.Output, r.Answer = st.Output.Raw, ""
	}
	if u := st.Usage; u != nil {
		r.Usage = &ReportUsage{Turns: u.Turns, Tokens: u.InputTokens + u.OutputTokens, CostUSD: u.CostUSD, ToolCalls: u.ToolCalls,
			WallClockSeconds: u.WallClockSeconds}
	}
	return bound(r, inv.MaxResultBytes)
}

// bound marshals r in at most n bytes (n <= 0: no bound): an output that
// does not fit becomes an answer, and the answer is cut, until it fits.
func bound(r Report, n int) []byte {
	b, _ := json.Marshal(r)
	if n <= 0 || len(b) <= n {
		return b
	}
	if len(r.Output) > 0 {
		r.Answer, r.Output = string(r.Output), nil
	}
	if b, _ = json.Marshal(r); len(b) > n && r.Answer != "" {
		// Escaping takes up to six bytes a byte: keep the longest
		// beginning of the answer that fits once escaped (never more
		// than n bytes of it).
		answer := r.Answer
		fits := func(keep int) bool {
			r.Answer = clip.Head(answer, keep) + cutMark
			b, _ = json.Marshal(r)
			return len(b) <= n
		}
		keep := sort.Search(min(len(answer), n)+1, func(k int) bool { return !fits(k) }) - 1
		if keep >= 0 && fits(keep) {
			return b
		}
		r.Answer = ""
		b, _ = json.Marshal(r)
	}
	if len(b) > n {
		r.Answer, r.Reason = "", clip.Cut(r.Reason, max(0, n/4), "...")
		b, _ = json.Marshal(r)
	}
	if len(b) > n {
		b, _ = json.Marshal(Report{Run: clip.Cut(r.Run, 64, ""), Outcome: r.Outcome})
	}
	if len(b) > n {
		b = fmt.Appendf(nil, "%q", clip.Cut(r.Outcome, max(0, n-2), ""))
	}
	return b
}
