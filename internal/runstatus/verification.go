package runstatus

import (
	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// verificationStatus is status.verification: the trials used, the newest
// verdict and score, and the scores so far; nil for a run without a
// verifier, or before its first answer was judged.
func verificationStatus(v *loop.Verification) *v1alpha1.VerificationStatus {
	if v == nil {
		return nil
	}
	out := &v1alpha1.VerificationStatus{TrialsUsed: int32(v.Trial)}
	for _, d := range v.Verdicts {
		if d.Score != nil {
			out.Scores = append(out.Scores, loop.FormatScore(*d.Score))
		}
	}
	if n := len(out.Scores); n > loop.MaxTrialsLimit {
		out.Scores = out.Scores[n-loop.MaxTrialsLimit:]
	}
	if d := v.LastVerdict(); d != nil {
		out.LastVerdict = v1alpha1.VerdictNotVerified
		if d.Verified {
			out.LastVerdict = v1alpha1.VerdictVerified
		}
		if d.Score != nil {
			out.LastScore = loop.FormatScore(*d.Score)
		}
	}
	if n := v.TrialsToVerify(); n > 0 {
		out.TrialsToVerify = new(int32(n))
	}
	return out
}
