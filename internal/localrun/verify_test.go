package localrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/testenv"
)

// Issue 14: agentrun local runs spec.verify like the operator. The sample
// config/samples/09-verified-answer.yaml answers wrongly first; its verifier
// (a local process here) refuses, and the second trial is verified.
func TestRun_verifiedSampleCompletesOnTrialTwo(t *testing.T) {
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, filepath.Join(root, "config", "samples", "09-verified-answer.yaml"), Options{Stdout: &stdout, Stderr: &stderr})
	if code != 0 {
		t.Fatalf("exit status = %d, want 0\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	mustContain(t, "stdout", stdout.String(),
		"t1-verify check_answer: failed",
		"the answer must name the invoice that was charged twice",
		"Trial 2 of 3 starts from the goal with 1 reflection",
		"t3-verify check_answer: ok",
		"outcome: Completed\n",
		"was verified by check_answer: names the double-charged invoice\n",
		"answer: Invoice in_8c04 was charged twice")
}

// A verifier that never accepts: after maxTrials verdicts the run ends
// Escalated (exit status 6) with the last feedback in its reason.
func TestRun_neverVerifiedEscalatesAfterMaxTrials(t *testing.T) {
	dir := t.TempDir()
	manifest := `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: never-verified}
spec:
  goal: "Name the invoice."
  model:
    provider: scripted
    script:
    - content: "first guess"
    - content: "second guess"
  budget: {maxTurns: 6}
  tools:
  - name: judge
    job: {image: busybox, command: [sh, -c, 'cat >/dev/null; echo "{\"score\":0.1,\"feedback\":\"no invoice named\"}"; exit 1']}
  verify: {tool: judge, maxTrials: 2, stallTrials: 5}
`
	path := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	var stdout, stderr strings.Builder
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	code := Run(ctx, path, Options{Stdout: &stdout, Stderr: &stderr})
	if code != 6 {
		t.Fatalf("exit status = %d, want 6 (Escalated)\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
	out := stdout.String()
	mustContain(t, "stdout", out, "outcome: Escalated\n", "no invoice named")
	if n := strings.Count(out, "judge: failed"); n != 2 {
		t.Errorf("the verifier judged %d answers, want maxTrials = 2:\n%s", n, out)
	}
}
