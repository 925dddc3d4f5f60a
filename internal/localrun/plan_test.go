package localrun

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Issue 17: config/samples/10-plan-execute.yaml plans the double charge in
// one model call; E2 and E3 need E1's account id (their tools fail without
// it) and run after it; the solver answers in the second model call.
func TestRun_planExecuteSampleCompletesInTwoModelCalls(t *testing.T) {
	r := runPath(t, samplePath(t, "10-plan-execute.yaml"), Options{})
	r.mustExit(t, 0)
	out := r.stdout
	mustContain(t, "stdout", out,
		"Plan 1 accepted, 3 steps: E1 identify_account; E2 find_invoices (after E1); E3 plan_changes (after E1)",
		`p1-E2 find_invoices {"account_id":"acct_4b71c9e20d8af315","from_date":"2026-08-01","to_date":"2026-08-31"} -> allow`,
		`p1-E3 plan_changes: ok`, `-> {"changes":[{"on":"2026-08-14"`,
		"Every step of plan 1 has its result; the solver answers",
		"outcome: Completed\n")
	if n := strings.Count(out, "Turn "); n != 2 {
		t.Errorf("%d model turns, want 2:\n%s", n, out)
	}
	if strings.Contains(out, "warning:") {
		t.Errorf("a clean plan warns:\n%s", out)
	}
}

// A refund step waits for a person: with nobody at the terminal it is
// declined, the plan stops, and with no replan left the run is handed to
// a person (Escalated, exit status 6) without running the refund.
func TestRun_planStepDeclinedWithNoReplanLeftEscalates(t *testing.T) {
	dir := t.TempDir()
	r := runPath(t, writeManifestIn(t, dir, readTestdata(t, "planned-refund.yaml")), Options{})
	r.mustExit(t, 6) // Escalated
	mustContain(t, "stdout", r.stdout,
		`p1-E2 issue_refund {"charge":"ch_2"} -> needs a person (tool.irreversible)`,
		"outcome: Escalated\n",
		"plan 1 stopped: step E2 (issue_refund) did not run (declined")
	if _, err := os.Stat(filepath.Join(dir, "refunded")); err == nil {
		t.Fatal("the declined refund ran")
	}
}

// plannedRun is a planExecute manifest with billing tools run as local
// processes; %s is the script and %s the extra spec lines.
const plannedRun = `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: planned}
spec:
  goal: "Explain the August charges."
  strategy: planExecute
  model:
    provider: scripted
    script:
%s
  budget: {maxTurns: 6}
  tools:
  - name: identify_account
    job: {image: busybox, command: [sh, -c, 'cat >/dev/null; echo "{\"account_id\":\"acct_1\"}"']}
  # find_invoices and plan_changes each wait (bounded) until the other has
  # started: they succeed only when they run at the same time.
  - name: find_invoices
    job: {image: busybox, command: [sh, -c, 'grep -q acct_1 || exit 2; touch e2; for i in $(seq 200); do [ -f e3 ] && break; sleep 0.05; done; [ -f e3 ] || exit 3; echo "{\"invoices\":2}"']}
  - name: plan_changes
    job: {image: busybox, command: [sh, -c, 'grep -q acct_1 || exit 2; touch e3; for i in $(seq 200); do [ -f e2 ] && break; sleep 0.05; done; [ -f e2 ] || exit 3; echo "{\"changes\":1}"']}
  - name: export_all
    job: {image: busybox, command: [sh, -c, 'cat >/dev/null; touch exported; echo done']}
  - name: issue_refund
    mutates: true
    reversible: false
    job: {image: busybox, command: [sh, -c, 'cat >/dev/null; touch refunded; echo "{\"refund\":\"re_1\"}"']}
  - name: broken
    job: {image: busybox, command: [sh, -c, 'cat >/dev/null; echo "ledger offline" >&2; exit 4']}
%s`

const (
	localPlan = `    - toolCalls:
      - name: submit_plan
        arguments:
          steps:
          - {id: E1, tool: identify_account, arguments: {}}
          - {id: E2, tool: find_invoices, arguments: {account_id: "#E1.account_id"}}
          - {id: E3, tool: plan_changes, arguments: {account_id: "#E1.account_id"}}
`
	localAnswer = "    - content: Two charges.\n"
)

func TestRun_planExecuteScenarios(t *testing.T) {
	cases := []struct {
		name   string
		script string
		spec   string
		stdin  string
		code   int
		want   []string
		files  []string // files the tools must have left (or, with "!", not)
	}{
		{name: "three steps, the independent two together, in two model calls", script: localPlan + localAnswer,
			want:  []string{"Plan 1 step E2 (find_invoices) starts", "Plan 1 step E3 (plan_changes) starts", "p1-E3 plan_changes: ok", "outcome: Completed\n"},
			files: []string{"e2", "e3"}},
		{name: "a refused step triggers one replan", spec: "  policy: {rules: [{tools: [export_all], decision: deny, reason: no bulk exports}]}\n",
			script: `    - toolCalls:
      - name: submit_plan
        arguments: {steps: [{id: E1, tool: export_all, arguments: {}}]}
` + localPlan + localAnswer,
			want:  []string{"Plan 1 refused: step E1 (export_all) was refused (policy.rules[0]): no bulk exports", "plan 2 is asked for (replan 1 of 1)", "p2-E3 plan_changes: ok", "outcome: Completed\n"},
			files: []string{"!exported"}},
		{name: "an ask step waits and an approval resumes the plan", stdin: "approve\n",
			script: `    - toolCalls:
      - name: submit_plan
        arguments: {steps: [{id: E1, tool: identify_account, arguments: {}}, {id: E2, tool: issue_refund, arguments: {account: "#E1.account_id"}}]}
` + localAnswer,
			want:  []string{"? p1-E2 issue_refund asks a person", `arguments (sha256:`, `{"account":"acct_1"}`, "A person answered approve for p1-E2", "outcome: Completed\n"},
			files: []string{"refunded"}},
		{name: "a failed step with no replan left ends ToolFailure", spec: "  plan: {maxReplans: 0}\n", code: 7,
			script: `    - toolCalls:
      - name: submit_plan
        arguments: {steps: [{id: E1, tool: broken, arguments: {}}, {id: E2, tool: issue_refund, arguments: {x: "#E1"}}]}
`,
			want:  []string{"outcome: ToolFailure\n", "plan 1 stopped: step E1 (broken) failed: broken failed with exit code 4", "no replan is left (plan.maxReplans is 0)"},
			files: []string{"!refunded"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			var o Options
			if tc.stdin != "" {
				o.Interactive, o.Stdin = true, strings.NewReader(tc.stdin)
			}
			r := runPath(t, writeManifestIn(t, dir, fmt.Sprintf(plannedRun, tc.script, tc.spec)), o)
			r.mustExit(t, tc.code)
			mustContain(t, "stdout", r.stdout, tc.want...)
			for _, f := range tc.files {
				_, err := os.Stat(filepath.Join(dir, strings.TrimPrefix(f, "!")))
				if strings.HasPrefix(f, "!") == (err == nil) {
					t.Errorf("file %s: %v\nstdout:\n%s", f, err, r.stdout)
				}
			}
		})
	}
}
