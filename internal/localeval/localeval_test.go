package localeval

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

// overlap is an evaluation of three cases, two repeats each, two at once,
// whose template's one tool counts the runs in a call at the same moment:
// each call holds a directory of its own for a moment, and appends how
// many such directories it saw to the file counts.
const overlap = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: counter}
spec:
  parameters:
  - {name: who, required: true}
  run:
    goal: "Count the runs in a call, for $(params.who)."
    model:
      provider: scripted
      script:
      - toolCalls: [{name: count, arguments: {}}]
      - content: "Counted for $(params.who)."
    budget: {maxTurns: 3}
    tools:
    - name: count
      description: "Count the runs in a call."
      parameters: {type: object}
      job:
        image: busybox
        # The pause keeps the call in flight while the others start.
        command: [sh, -c, 'cat >/dev/null; mkdir in-call.$$; ls -d in-call.* | wc -l >>counts; sleep 0.3; rmdir in-call.$$; echo "{}"']
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentEvaluation
metadata: {name: overlap}
spec:
  templateRef: {name: counter}
  repeats: 2
  concurrency: 2
  cases:
  - {name: a, parameters: [{name: who, value: a}], expect: {answer: ['for a']}}
  - {name: b, parameters: [{name: who, value: b}], expect: {answer: ['for b']}}
  - {name: c, parameters: [{name: who, value: c}], expect: {answer: ['for c']}}
`

// Issue 48: an evaluation never has more than concurrency runs going at
// once, with no cluster as in one, and every case's runs are scored.
func TestRun_neverMoreThanConcurrencyAtOnce(t *testing.T) {
	dir := t.TempDir()
	res := runIn(t, dir, overlap)
	b, err := os.ReadFile(filepath.Join(dir, "counts"))
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Fields(string(b))
	most := 0
	for _, l := range lines {
		n, err := strconv.Atoi(l)
		if err != nil {
			t.Fatalf("counts holds %q", b)
		}
		most = max(most, n)
	}
	if len(lines) != 6 || most > 2 || most < 1 {
		t.Errorf("the six calls saw %q runs in a call at once; want six counts of at most 2 (spec.concurrency)", lines)
	}
	st := res.Evaluation.Status
	got := []any{st.Phase, st.Totals.Passed, len(st.Cases), res.Evaluation.Status.Cases[2].Results[1].Run}
	if diff := cmp.Diff([]any{v1alpha1.EvaluationPassed, int32(6), 3, "overlap-c-2"}, got); diff != "" {
		t.Errorf("(phase, passed, cases, the last run) (-want +got):\n%s", diff)
	}
}

// variants is an evaluation of two templates on one case: the polite one
// says "refunded", the terse one does not.
const variants = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: polite}
spec:
  run:
    goal: "Answer the customer."
    model: {provider: scripted, script: [{content: "We refunded you."}]}
    budget: {maxTurns: 2}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: terse}
spec:
  run:
    goal: "Answer the customer."
    model: {provider: scripted, script: [{content: "Done."}]}
    budget: {maxTurns: 2}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentEvaluation
metadata: {name: tone}
spec:
  variants:
  - {name: polite, templateRef: {name: polite}}
  - {name: terse, templateRef: {name: terse}}
  cases:
  - {name: refund, expect: {answer: ['refunded']}}
`

// Issue 48: each variant's runs are made from its own template, named
// after it, and counted apart, as the operator counts them.
func TestRun_eachVariantIsRunAndCountedApart(t *testing.T) {
	res := runIn(t, t.TempDir(), variants)
	got := map[string]string{}
	for _, v := range res.Evaluation.Status.Variants {
		for _, c := range v.Cases {
			for _, r := range c.Results {
				got[v.Name+"/"+c.Name] = r.Run + " " + strconv.FormatBool(r.Passed)
			}
		}
	}
	want := map[string]string{"polite/refund": "tone-polite-refund-1 true", "terse/refund": "tone-terse-refund-1 false"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("results by variant (-want +got):\n%s", diff)
	}
	if ph := res.Evaluation.Status.Phase; ph != v1alpha1.EvaluationFailed {
		t.Errorf("phase %s, want Failed (the terse variant missed)", ph)
	}
}

// judged is variants judged by a scripted judge: the polite variant's
// run (the first made) scores 5, the terse one's gets a reply that is no
// verdict.
var judged = strings.Replace(variants, "  - {name: refund, expect: {answer: ['refunded']}}", `  - {name: refund}
  judge:
    rubric: "The answer says what was refunded."
    model:
      provider: scripted
      pricing: {input: "1", output: "2"}
      script:
      - {content: '{"score": 5, "rationale": "Says the refund was made."}', usage: {inputTokens: 1000, outputTokens: 100}}
      - {content: 'Five stars.', usage: {inputTokens: 1000, outputTokens: 100}}
`, 1)

// Issue 48: agentrun eval judges each run with the judge the operator
// would call, in the same order: a score is kept with its rationale and
// counted in its variant's mean, a reply that is no verdict fails the
// case with the reason, and the judge's spend is in the totals.
func TestRun_aScriptedJudgeScoresEachRun(t *testing.T) {
	res := runIn(t, t.TempDir(), judged)
	st := res.Evaluation.Status
	polite, terse := st.Variants[0], st.Variants[1]
	got := []any{polite.Totals.Passed, polite.Totals.JudgeMeanScore, polite.Cases[0].Results[0].JudgeRationale,
		terse.Totals.Failed, terse.Totals.JudgeMeanScore, st.Totals.JudgeCostUSD, st.Totals.JudgeTokens}
	want := []any{int32(1), "5.00", "Says the refund was made.", int32(1), "", v1alpha1.USD("0.0024"), int64(2200)}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(polite passed, mean, rationale; terse failed, mean; judge cost, tokens) (-want +got):\n%s", diff)
	}
	if why := terse.Cases[0].FailureReason; !strings.HasPrefix(why, `judge: its reply is not that JSON object`) {
		t.Errorf("terse's reason %q, want the judge's reply refused", why)
	}
}

// fromConfigMap is variants with one more case read from a ConfigMap of
// the file.
var fromConfigMap = strings.Replace(variants, "  - {name: refund, expect: {answer: ['refunded']}}", `  - {name: refund, expect: {answer: ['refunded']}}
  casesFrom: {configMapKeyRef: {name: more-cases, key: cases.yaml}}
---
apiVersion: v1
kind: ConfigMap
metadata: {name: more-cases}
data:
  cases.yaml: |
    - {name: done, expect: {answer: ['^Done\.$']}}
`, 1)

// Issue 48: agentrun eval reads spec.casesFrom from the files'
// ConfigMaps, as the operator reads it from the cluster, and runs those
// cases after the inline ones; a ConfigMap that holds no valid cases
// stops it before anything runs, saying what is wrong.
func TestRun_casesFromAConfigMap(t *testing.T) {
	res := runIn(t, t.TempDir(), fromConfigMap)
	got := map[string]string{}
	for _, v := range res.Evaluation.Status.Variants {
		for _, c := range v.Cases {
			got[v.Name+"/"+c.Name] = fmt.Sprint(c.Passed, c.Failed)
		}
	}
	want := map[string]string{"polite/refund": "1 0", "polite/done": "0 1", "terse/refund": "0 1", "terse/done": "1 0"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("passed and failed by variant and case (-want +got):\n%s", diff)
	}

	file := filepath.Join(t.TempDir(), "evaluation.yaml")
	if err := os.WriteFile(file, []byte(strings.Replace(fromConfigMap, "- {name: done,", "- {name: refund,", 1)), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(file, nil)
	if want := `spec.casesFrom: ConfigMap more-cases key cases.yaml: invalid cases: its cases follow the 1 of spec.cases, from spec.cases[1]: spec.cases[1]: Duplicate value`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("Load = %v; want an error holding %q", err, want)
	}
}

// calls is an evaluation whose run looks a customer up and refunds 500;
// its cases expect calls by tool and by arguments.
const calls = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRunTemplate
metadata: {name: refunder}
spec:
  run:
    goal: "Refund the customer."
    model:
      provider: scripted
      script:
      - toolCalls: [{name: lookup_customer, arguments: {id: cus_1}}]
      - toolCalls: [{name: issue_refund, arguments: {amount: 500}}]
      - content: "Refunded."
    budget: {maxTurns: 4}
    tools:
    - name: lookup_customer
      description: "Look a customer up."
      parameters: {type: object}
      job: {image: busybox, command: [sh, -c, 'cat >/dev/null; echo "{}"']}
    - name: issue_refund
      description: "Refund."
      parameters: {type: object}
      job: {image: busybox, command: [sh, -c, 'cat >/dev/null; echo "{}"']}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentEvaluation
metadata: {name: calls}
spec:
  templateRef: {name: refunder}
  cases:
  - {name: looked-up, expect: {calls: [{tool: lookup_customer, when: 'args.id == "cus_1"'}]}}
  - {name: verified, expect: {calls: [{tool: verify_identity}]}}
  - {name: small-refunds, expect: {calls: [{tool: issue_refund, when: 'args.amount > 100', max: 0}]}}
`

// Issue 48: a local evaluation scores the calls its runs made, from
// their transcripts in memory, as the operator does from theirs.
func TestRun_callsAreScoredFromTheTranscript(t *testing.T) {
	res := runIn(t, t.TempDir(), calls)
	got := map[string]string{}
	for _, c := range res.Evaluation.Status.Cases {
		got[c.Name] = c.FailureReason
	}
	want := map[string]string{
		"looked-up":     "",
		"verified":      "calls[0]: expected at least 1 call to verify_identity, the run made none",
		"small-refunds": "calls[0]: expected no call to issue_refund where args.amount > 100, the run made 1 (the first in turn 2)",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("failure reasons by case (-want +got):\n%s", diff)
	}
}

// A condition that does not compile is found when the file is loaded,
// before any run: the API server cannot compile it.
func TestLoad_aCallConditionThatDoesNotCompile(t *testing.T) {
	file := filepath.Join(t.TempDir(), "evaluation.yaml")
	bad := strings.Replace(calls, `args.amount > 100`, `args.amount >`, 1)
	if err := os.WriteFile(file, []byte(bad), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Load(file, nil)
	want := file + `: case small-refunds: expect.calls[0].when "args.amount >" does not compile`
	if err == nil || !strings.HasPrefix(err.Error(), want) {
		t.Errorf("Load = %v, want an error starting %q", err, want)
	}
}

// runIn writes manifest to evaluation.yaml in dir, where its job tools
// run, and runs the evaluation it holds.
func runIn(t *testing.T, dir, manifest string) *Result {
	t.Helper()
	file := filepath.Join(dir, "evaluation.yaml")
	if err := os.WriteFile(file, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	p, err := Load(file, nil)
	if err != nil {
		t.Fatal(err)
	}
	res, err := p.Run(context.Background(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	return res
}
