package console

import (
	"net/http"
	"strconv"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/evaluation"
	"github.com/agentrun/agentrun/internal/safeterm"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/duration"
)

// evaluationRow is one AgentEvaluation on the evaluations page, from its
// status: how many of its runs passed, its pass rate and what its runs
// spent.
type evaluationRow struct {
	Namespace, Name, Phase string
	Passed, PassRate, Cost string
	Age                    string
}

// evaluations lists the AgentEvaluations the user may list, each linking
// to its page.
func (s *Server) evaluations(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	now := time.Now()
	return listPage(r, s, u, r.URL.Query().Get("namespace"), view{Title: "Evaluations", Page: "evaluations"},
		func() *v1alpha1.AgentEvaluationList { return &v1alpha1.AgentEvaluationList{} },
		func(l *v1alpha1.AgentEvaluationList) []v1alpha1.AgentEvaluation { return l.Items },
		func(e *v1alpha1.AgentEvaluation) evaluationRow {
			row := evaluationRow{Namespace: e.Namespace, Name: e.Name, Phase: string(e.Status.Phase),
				Age: duration.HumanDuration(now.Sub(e.CreationTimestamp.Time))}
			if t := e.Status.Totals; t != nil {
				row.Passed = strconv.Itoa(int(t.Passed)) + "/" + strconv.Itoa(int(t.Runs))
				row.PassRate, row.Cost = t.PassRate, dollars(t.CostUSD)
			}
			return row
		})
}

// dollars is an amount in US dollars as the pages show it; "" when unset.
func dollars(usd v1alpha1.USD) string {
	if usd == "" {
		return ""
	}
	return "$" + string(usd)
}

// evaluationData is one AgentEvaluation's page: its status, by variant
// (evaluation.Groups), what regressed against its baseline and whether
// the baseline could be compared.
type evaluationData struct {
	Namespace, Name, Phase, Reason string
	Totals                         *totalsView
	Groups                         []groupView
	Regressions                    []v1alpha1.EvaluationRegression
	Baseline                       string
	Compared                       *conditionView
}

type totalsView struct {
	Runs, Passed, Failed   int32
	PassRate, VerifiedRate string
	Cost                   string
}

// groupView is one variant's results; Name is "" for an evaluation with
// spec.templateRef.
type groupView struct {
	Name   string
	Totals *totalsView
	Cases  []caseView
}

// caseView is one case: its counts, why its first failed run failed, and
// each of its runs scored so far, linking to the run's page.
type caseView struct {
	Name                 string
	Runs, Passed, Failed int32
	FailedRun, Reason    string
	Results              []resultView
}

type resultView struct {
	Repeat    int32
	Run, Link string
	Passed    bool
	Cost      string
}

type conditionView struct{ Status, Reason, Message string }

func totalsOf(t *v1alpha1.EvaluationTotals) *totalsView {
	if t == nil {
		return nil
	}
	return &totalsView{Runs: t.Runs, Passed: t.Passed, Failed: t.Failed, PassRate: t.PassRate,
		VerifiedRate: t.VerifiedRate, Cost: dollars(t.CostUSD)}
}

// evaluation shows one AgentEvaluation from its status only.
func (s *Server) evaluation(w http.ResponseWriter, r *http.Request, u *user) (view, error) {
	ns, name := r.PathValue("namespace"), r.PathValue("name")
	v := view{Title: name, Page: "evaluation"}
	e := &v1alpha1.AgentEvaluation{}
	if err := u.c.Get(r.Context(), types.NamespacedName{Namespace: ns, Name: name}, e); err != nil {
		return v, err
	}
	d := &evaluationData{Namespace: e.Namespace, Name: e.Name, Phase: string(e.Status.Phase), Totals: totalsOf(e.Status.Totals)}
	if c := apimeta.FindStatusCondition(e.Status.Conditions, v1alpha1.EvaluationConditionComplete); c != nil {
		d.Reason = safeterm.Clean(c.Reason + ": " + c.Message)
	}
	if b := e.Spec.Baseline; b != nil {
		d.Baseline = b.Evaluation
	}
	if c := apimeta.FindStatusCondition(e.Status.Conditions, v1alpha1.EvaluationConditionBaselineCompared); c != nil {
		d.Compared = &conditionView{Status: string(c.Status), Reason: c.Reason, Message: safeterm.Clean(c.Message)}
	}
	for _, g := range evaluation.Groups(&e.Status) {
		gv := groupView{Name: g.Name, Totals: totalsOf(g.Totals)}
		for _, cs := range g.Cases {
			cv := caseView{Name: cs.Name, Runs: cs.Runs, Passed: cs.Passed, Failed: cs.Failed,
				FailedRun: cs.FailedRun, Reason: safeterm.Clean(cs.FailureReason)}
			for _, res := range cs.Results {
				cv.Results = append(cv.Results, resultView{Repeat: res.Repeat, Run: res.Run, Link: runPage(e.Namespace, res.Run),
					Passed: res.Passed, Cost: dollars(res.CostUSD)})
			}
			gv.Cases = append(gv.Cases, cv)
		}
		d.Groups = append(d.Groups, gv)
	}
	for _, reg := range e.Status.Regressions {
		reg.Message = safeterm.Clean(reg.Message)
		d.Regressions = append(d.Regressions, reg)
	}
	v.Data = d
	return v, nil
}
