package evaluation

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
)

// Bounds of what the judge is shown and of what status keeps of it.
const (
	// judgeShownBytes bounds each of the goal, the answer and the output
	// the judge is shown, and so its input (which its ceilings count).
	judgeShownBytes = 16 << 10
	// judgeRationaleBytes is status.cases[].results[].judgeRationale's
	// MaxLength.
	judgeRationaleBytes = 512
)

// judgeSystem tells the judge what to do and how to answer, the scale's
// ends to be filled in (judgeRequest).
const judgeSystem = `You judge the answer of an AI agent against a rubric.
Read the rubric, the agent's goal and its answer, then score how well the answer meets the rubric, from %[1]d (does not meet it) to %[2]d (meets all of it).
Reply with one JSON object and nothing else: {"score": <a whole number from %[1]d to %[2]d>, "rationale": "<why, in one or two sentences>"}.`

// judgeSchema is the JSON Schema of the judge's reply, the scale's ends
// to be filled in, sent with the request (loop.Request.Output) so that a
// provider with structured output holds the judge to it; the reply is
// checked against it either way (ParseVerdict).
const judgeSchema = `{"type":"object","properties":{"score":{"type":"integer","minimum":%[1]d,"maximum":%[2]d},"rationale":{"type":"string","minLength":1}},"required":["score","rationale"],"additionalProperties":false}`

// onScale is format with the judge's scale's ends.
func onScale(format string) string {
	return fmt.Sprintf(format, v1alpha1.JudgeMinScale, v1alpha1.JudgeMaxScale)
}

// Judge scores runs with spec.judge's model. Build it with the model and
// prices kit.Builder.Judge makes of spec.judge.model.
type Judge struct {
	// Spec is the evaluation's spec.judge.
	Spec *v1alpha1.EvaluationJudge
	// Model is spec.judge.model's adapter, nil when it could not be
	// built: Unavailable says why.
	Model loop.Model
	// Pricing is what the model's tokens cost.
	Pricing loop.Pricing
	// Unavailable says why Model could not be built; each run judged
	// fails its case with it.
	Unavailable string
	// Lease, when set, covers each call's worst case (its tokens and
	// cost) in a shared budget (spec.budgetRef) before the call is made:
	// it returns settle, which is told what the call used, or why the
	// call may not be made (the run fails its case, saying so). An error
	// is a budget that could not be read or written now: the run is
	// judged later.
	Lease func(ctx context.Context, tokens int64, cost loop.Money) (settle func(tokens int64, cost loop.Money), refused string, err error)
}

// Verdict is what the judge made of one run.
type Verdict struct {
	// Score is the judge's score, 0 when it gave none.
	Score int32
	// Rationale is why, as the judge said it.
	Rationale string
	// Failure is why the run fails by the judge (a score below minScore,
	// or no score), "" when it passes.
	Failure string
	// Tokens and Cost are what the judge's call used and spent.
	Tokens int64
	Cost   loop.Money
	// Err is set when the run could not be judged now (Lease's error).
	Err error
}

// JudgeSpent is what the judge's calls about e's runs have used and spent
// so far, as e's status records them.
func JudgeSpent(e *v1alpha1.AgentEvaluation) (tokens int64, cost loop.Money) {
	add := func(cases []v1alpha1.EvaluationCaseStatus) {
		for _, cs := range cases {
			for _, r := range cs.Results {
				m, _ := limits.Money("judgeCostUSD", r.JudgeCostUSD) // written from a priced amount
				tokens, cost = tokens+r.JudgeTokens, cost+m
			}
		}
	}
	add(e.Status.Cases)
	for _, v := range e.Status.Variants {
		add(v.Cases)
	}
	return tokens, cost
}

// RunIndex is the place of the run of case caseIndex's repeat of variant
// among all of e's runs, from 0, in the order they are made: case by
// case, repeat by repeat, variant by variant. A scripted judge judges run
// i with its script's entry i.
func RunIndex(e *v1alpha1.AgentEvaluation, variant string, caseIndex int, repeat int32) int {
	vs := Variants(e)
	vi := 0
	for i, v := range vs {
		if v.Name == variant {
			vi = i
		}
	}
	return (caseIndex*int(max(e.Spec.Repeats, 1))+int(repeat-1))*len(vs) + vi
}

// JudgeResult judges run, a run of case c that met every other
// expectation (why is ScoreWithCalls' answer) when e has a judge: it
// fills res's judge fields and returns the run's reason, why when the run
// was not judged. index is RunIndex's. The judge's ceilings are held
// against what e's status records it spent (JudgeSpent): record each
// result before judging the next. An error (Verdict.Err) leaves the run
// to be judged later, res unchanged.
func (j *Judge) JudgeResult(ctx context.Context, e *v1alpha1.AgentEvaluation, c *v1alpha1.EvaluationCase, run *v1alpha1.AgentRun, index int, res *v1alpha1.EvaluationRunResult, why string) (string, error) {
	if j == nil || why != "" {
		return why, nil
	}
	tokens, cost := JudgeSpent(e)
	v := j.Judge(ctx, c, run, index, tokens, cost)
	if v.Err != nil {
		return "", v.Err
	}
	if v.Score > 0 {
		s := v.Score
		res.JudgeScore = &s
	}
	res.JudgeRationale = clipTo(v.Rationale, judgeRationaleBytes)
	res.JudgeTokens = v.Tokens
	if v.Cost > 0 {
		res.JudgeCostUSD = v1alpha1.USD(v.Cost.String())
	}
	res.Passed = v.Failure == ""
	return v.Failure, nil
}

// Judge asks the judge to score run, a run of case c, once, unless the
// call could pass the judge's ceilings given what its calls have already
// used (spentTokens) and spent (spentCost). A reply that is not the
// verdict asked for, a refusal and a failed call are failures with the
// reason, never errors: the run fails its case.
func (j *Judge) Judge(ctx context.Context, c *v1alpha1.EvaluationCase, run *v1alpha1.AgentRun, index int, spentTokens int64, spentCost loop.Money) Verdict {
	if j.Unavailable != "" || j.Model == nil {
		return Verdict{Failure: "judge: its model cannot be called: " + excerpt(orDefault(j.Unavailable, "none is configured"))}
	}
	spec := j.Spec
	rubric, minScore := spec.Rubric, max(spec.MinScore, v1alpha1.JudgeMinScale)
	if cj := c.Expect.Judge; cj != nil {
		if cj.Rubric != "" {
			rubric = cj.Rubric
		}
		if cj.MinScore != nil {
			minScore = *cj.MinScore
		}
	}
	maxOut := int64(loop.DefaultMaxOutputTokens)
	if n := spec.Model.MaxOutputTokens; n != nil && *n > 0 {
		maxOut = int64(*n)
	}
	req := &loop.Request{Model: spec.Model.Name, System: onScale(judgeSystem), MaxOutputTokens: maxOut, Output: json.RawMessage(onScale(judgeSchema)),
		EarlierAnswers: index, Messages: []loop.Message{{Role: loop.RoleUser, Content: judgePrompt(rubric, run)}}}
	if why := j.overCeiling(req, spentTokens, spentCost); why != "" {
		return Verdict{Failure: "judge: not called: " + why}
	}
	in := j.inputTokens(req)
	settle := func(int64, loop.Money) {}
	if j.Lease != nil {
		s, refused, err := j.Lease(ctx, in+maxOut, j.Pricing.Most(in, maxOut))
		switch {
		case err != nil:
			return Verdict{Err: err}
		case refused != "":
			return Verdict{Failure: "judge: not called: " + refused}
		}
		settle = s
	}
	cctx, cancel := context.WithTimeout(ctx, JudgeTimeout(spec))
	defer cancel()
	reply, err := j.Model.Complete(cctx, req)
	if err != nil {
		// What a failed call cost is not known: it is charged what it
		// may have cost, as a run's abandoned call is.
		v := Verdict{Failure: "judge: the call failed: " + excerpt(err.Error()), Tokens: in + maxOut, Cost: j.Pricing.Most(in, maxOut)}
		settle(v.Tokens, v.Cost)
		return v
	}
	v := Verdict{Tokens: reply.Usage.InputTokens + reply.Usage.OutputTokens, Cost: j.Pricing.Cost(reply.Usage)}
	settle(v.Tokens, v.Cost)
	switch {
	case reply.Refusal != "":
		v.Failure = "judge: it refused: " + excerpt(reply.Refusal)
		return v
	case reply.Truncated:
		v.Failure = fmt.Sprintf("judge: its reply was cut at %d tokens (judge.model.maxOutputTokens): %q", maxOut, excerpt(reply.Content))
		return v
	}
	score, rationale, err := ParseVerdict(reply.Content)
	if err != nil {
		v.Failure = "judge: " + err.Error()
		return v
	}
	v.Score, v.Rationale = score, rationale
	if score < minScore {
		v.Failure = fmt.Sprintf("judge: scored %d of %d, below minScore %d: %s", score, v1alpha1.JudgeMaxScale, minScore, excerpt(rationale))
	}
	return v
}

// overCeiling says why the call req could pass the judge's ceilings, ""
// when it cannot: its input as the model (or the engine's byte count)
// estimates it, and its whole output limit.
func (j *Judge) overCeiling(req *loop.Request, spentTokens int64, spentCost loop.Money) string {
	in := j.inputTokens(req)
	if n := j.Spec.MaxTokens; n != nil && spentTokens+in+req.MaxOutputTokens > *n {
		return fmt.Sprintf("its calls have used %d of maxTokens %d, and this one may use %d", spentTokens, *n, in+req.MaxOutputTokens)
	}
	if j.Spec.MaxCostUSD != "" {
		ceiling, err := limits.Money("judge.maxCostUSD", j.Spec.MaxCostUSD)
		if err != nil {
			return err.Error()
		}
		if most := j.Pricing.Most(in, req.MaxOutputTokens); spentCost+most > ceiling {
			return fmt.Sprintf("its calls have spent $%s of maxCostUSD $%s, and this one may cost $%s", spentCost, j.Spec.MaxCostUSD, most)
		}
	}
	return ""
}

// inputTokens estimates req's input tokens as a run's admission does: the
// model's own estimate, or the engine's byte count.
func (j *Judge) inputTokens(req *loop.Request) int64 {
	if e, ok := j.Model.(loop.TokenEstimator); ok {
		return e.EstimateInputTokens(req)
	}
	return loop.ByteEstimator{}.EstimateInputTokens(req)
}

// JudgeTimeout bounds one call of the judge: judge.model.timeout, or the
// engine's default.
func JudgeTimeout(spec *v1alpha1.EvaluationJudge) time.Duration {
	if t := spec.Model.Timeout; t != nil && t.Duration > 0 {
		return t.Duration
	}
	return loop.DefaultModelTimeout
}

// judgePrompt is what the judge is shown of run: the rubric, the goal,
// the answer and the typed output, each cut to judgeShownBytes.
func judgePrompt(rubric string, run *v1alpha1.AgentRun) string {
	var b strings.Builder
	fmt.Fprintf(&b, "Rubric:\n%s\n\nThe agent's goal:\n%s\n\nThe agent's answer:\n%s\n", rubric,
		clipTo(run.Goal(), judgeShownBytes), clipTo(orDefault(run.Status.Answer, "(none)"), judgeShownBytes))
	if o := run.Status.Output; o != nil && len(o.Raw) > 0 {
		fmt.Fprintf(&b, "\nThe agent's typed output (JSON):\n%s\n", clipTo(string(o.Raw), judgeShownBytes))
	}
	return b.String()
}

// ParseVerdict reads the judge's reply: exactly one JSON object with a
// whole-number score on the judge's scale and a rationale that says
// something, and no other field. Its error says what was wrong and quotes
// the reply.
func ParseVerdict(content string) (int32, string, error) {
	if strings.TrimSpace(content) == "" {
		return 0, "", errors.New("its reply is empty; it must be a JSON object {\"score\", \"rationale\"}")
	}
	bad := func(what string) (int32, string, error) {
		return 0, "", fmt.Errorf("its reply %s; it must be a JSON object {\"score\": %d to %d, \"rationale\": \"...\"}, it was %q",
			what, v1alpha1.JudgeMinScale, v1alpha1.JudgeMaxScale, excerpt(content))
	}
	dec := json.NewDecoder(strings.NewReader(content))
	dec.DisallowUnknownFields()
	var v struct {
		Score     json.RawMessage `json:"score"`
		Rationale *string         `json:"rationale"`
	}
	if err := dec.Decode(&v); err != nil {
		return bad("is not that JSON object (" + err.Error() + ")")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return bad("has more after the JSON object")
	}
	if v.Score == nil {
		return bad("has no score")
	}
	// A JSON number written as a whole number: not "4", 4.0 or 4e0.
	score, err := strconv.ParseInt(string(v.Score), 10, 32)
	if err != nil || score < v1alpha1.JudgeMinScale || score > v1alpha1.JudgeMaxScale {
		return bad(fmt.Sprintf("has the score %s, not a whole number from %d to %d", v.Score, v1alpha1.JudgeMinScale, v1alpha1.JudgeMaxScale))
	}
	if v.Rationale == nil || strings.TrimSpace(*v.Rationale) == "" {
		return bad("has no rationale")
	}
	return int32(score), strings.TrimSpace(*v.Rationale), nil
}

func orDefault(s, d string) string {
	if s == "" {
		return d
	}
	return s
}
