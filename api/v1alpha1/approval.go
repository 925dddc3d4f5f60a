package v1alpha1

import (
	"fmt"
	"strings"
)

// ApprovalAnswer is the value of an approval annotation
// (ApprovalAnnotationPrefix + callID): a decision, optionally followed by a
// colon and the argumentsDigest of the call it was given for, as in
// approve:sha256:<hex>. An answer with a digest applies only to a call
// with exactly those arguments; one without applies to whatever call has
// the id.
//
// ParseApprovalAnswer reads the value and String writes it; nothing else
// in Go splits or joins it. The admission policy agentrun-approval
// (config/admission/approval-policy.yaml) reads the digest in CEL the same
// way, and a test holds the two together.
//
// +kubebuilder:object:generate=false
type ApprovalAnswer struct {
	// Decision is approve, deny or stop.
	Decision ApprovalDecision
	// Digest is the argumentsDigest the answer names (sha256:<hex>); empty
	// for an answer bound to the call id only.
	Digest string
}

// ParseApprovalAnswer reads the value of an approval annotation. Space
// around the value is ignored and the case of ASCII letters is not
// significant; the decision is what comes before the first colon, the
// digest all that follows it (an empty digest names none). A value whose
// decision is not approve, deny or stop is an error: the operator does not
// apply it.
func ParseApprovalAnswer(value string) (ApprovalAnswer, error) {
	word, digest, _ := strings.Cut(strings.TrimSpace(value), ":")
	a := ApprovalAnswer{Decision: ApprovalDecision(lowerASCII(word)), Digest: lowerASCII(digest)}
	switch a.Decision {
	case ApprovalApprove, ApprovalDeny, ApprovalStop:
		return a, nil
	}
	return ApprovalAnswer{}, fmt.Errorf("%q is not an answer: an approval annotation holds approve, deny or stop, "+
		"optionally followed by a colon and the call's argumentsDigest (approve:sha256:...)", value)
}

// String is the annotation value of the answer: the decision, and ":" and
// the digest when it names one.
func (a ApprovalAnswer) String() string {
	if a.Digest == "" {
		return string(a.Decision)
	}
	return string(a.Decision) + ":" + a.Digest
}

// lowerASCII folds A-Z only, as CEL's lowerAscii does in the admission
// policy: strings.ToLower would fold other letters too.
func lowerASCII(s string) string {
	return strings.Map(func(r rune) rune {
		if 'A' <= r && r <= 'Z' {
			return r + ('a' - 'A')
		}
		return r
	}, s)
}
