package localrun

import (
	"strings"
	"testing"
)

// Issue 14: agentrun local runs spec.verify like the operator. The sample
// config/samples/09-verified-answer.yaml answers wrongly first; its verifier
// (a local process here) refuses, and the second trial is verified.
func TestRun_verifiedSampleCompletesOnTrialTwo(t *testing.T) {
	r := runPath(t, samplePath(t, "09-verified-answer.yaml"), Options{})
	r.mustExit(t, 0)
	mustContain(t, "stdout", r.stdout,
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
	r := runPath(t, testdataPath("never-verified.yaml"), Options{})
	r.mustExit(t, 6) // Escalated
	out := r.stdout
	mustContain(t, "stdout", out, "outcome: Escalated\n", "no invoice named")
	if n := strings.Count(out, "judge: failed"); n != 2 {
		t.Errorf("the verifier judged %d answers, want maxTrials = 2:\n%s", n, out)
	}
}
