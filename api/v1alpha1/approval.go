package v1alpha1

import (
	"encoding/json"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxApprovalReason bounds the reason a person gives with an answer, in
// characters (Unicode code points, as CEL's size() and the CRD's maxLength
// count them). The admission policy agentrun-approval refuses a longer
// one, and so does ParseApprovalAnswer; status.approvals[].reason has the
// same maxLength.
const MaxApprovalReason = 1024

// MaxApprovalEdit bounds the JSON merge patch of an approval with changes
// (edit:DIGEST:PATCH), in characters, as MaxApprovalReason bounds a
// reason: the admission policy agentrun-approval and ParseApprovalAnswer
// refuse a longer one, and status.approvals[].edit.patch has the same
// maxLength. An annotation holds the patch, not the whole arguments.
const MaxApprovalEdit = 4096

// approvalEditWord is the first field of an approval with changes.
const approvalEditWord = "edit"

// ApprovalAnswer is the value of an approval annotation
// (ApprovalAnnotationPrefix + callID):
//
//	DECISION[:DIGEST[:REASON]]
//
// a decision, optionally followed by a colon and the argumentsDigest of
// the call it was given for (sha256:<hex>, itself one colon), optionally
// followed by a colon and the reason the person gives, which is everything
// after it, colons and line breaks included. An answer with a reason and
// no digest leaves the digest empty: deny::REASON. An answer with a digest
// applies only to a call with exactly those arguments; one without applies
// to whatever call has the id. A denial's reason is what the model reads
// as the call's result. The decision answer (ApprovalReply) answers a
// question the agent asked (builtin person.ask): its reason is the
// answer's text, required, and is what the model reads as the call's
// result.
//
// An approval with changes is
//
//	edit:DIGEST:PATCH
//
// the digest of the arguments the person was shown (required), and a
// JSON merge patch (RFC 7386, a JSON object) to apply to them: the call
// runs with the patched arguments once they pass vetting again. It reads
// as Decision approve with Edit set; it gives no reason.
//
// ParseApprovalAnswer reads the value and String writes it; nothing else
// in Go splits or joins it. The admission policy agentrun-approval
// (config/admission/approval-policy.yaml) reads the digest and the reason
// in CEL the same way, and a test holds the two together.
//
// +kubebuilder:object:generate=false
type ApprovalAnswer struct {
	// Decision is approve, deny or stop.
	Decision ApprovalDecision
	// Digest is the argumentsDigest the answer names (sha256:<hex>); empty
	// for an answer bound to the call id only.
	Digest string
	// Reason is why the person answered so, in their words (at most
	// MaxApprovalReason characters, space around it removed); empty when
	// they gave none.
	Reason string
	// Edit is the JSON merge patch of an approval with changes (a JSON
	// object, at most MaxApprovalEdit characters, space around it
	// removed); empty for an answer without changes. An answer with an
	// edit approves and names a digest.
	Edit string
}

// ParseApprovalAnswer reads the value of an approval annotation. Space
// around the value is ignored. The decision is what comes before the
// first colon; after it, an empty field (deny::REASON) names no digest,
// and otherwise the digest is the next two colon-separated fields
// (sha256:<hex>), or the one field left; the reason is all that follows
// the colon after the digest, with space around it removed. The case of
// ASCII letters is not significant in the decision and the digest, and is
// kept in the reason. The word edit reads as approve with the reason's
// place holding Edit, which must be a JSON object of at most
// MaxApprovalEdit characters, after a digest. A value whose decision is
// not approve, deny, stop or edit, whose reason is longer than
// MaxApprovalReason, or whose edit is not as said, is an error: the
// operator does not apply it.
func ParseApprovalAnswer(value string) (ApprovalAnswer, error) {
	word, rest, _ := strings.Cut(strings.TrimSpace(value), ":")
	var digest, reason string
	if r, ok := strings.CutPrefix(rest, ":"); ok {
		reason = r
	} else if algorithm, after, ok := strings.Cut(rest, ":"); ok {
		var hex string
		hex, reason, _ = strings.Cut(after, ":")
		digest = algorithm + ":" + hex
	} else {
		digest = rest
	}
	a := ApprovalAnswer{Decision: ApprovalDecision(lowerASCII(word)), Digest: lowerASCII(digest), Reason: strings.TrimSpace(reason)}
	switch a.Decision {
	case ApprovalApprove, ApprovalDeny, ApprovalStop:
	case ApprovalReply:
		if a.Reason == "" {
			return ApprovalAnswer{}, fmt.Errorf("%q gives no answer: an answer to the agent's question is answer::TEXT "+
				"(or answer:sha256:...:TEXT), the text after the second colon", value)
		}
	case approvalEditWord:
		a.Decision, a.Edit, a.Reason = ApprovalApprove, a.Reason, ""
		return a, checkEdit(value, a)
	default:
		return ApprovalAnswer{}, fmt.Errorf("%q is not an answer: an approval annotation holds approve, deny or stop, "+
			"optionally followed by a colon and the call's argumentsDigest (approve:sha256:...), "+
			"and by a colon and a reason (deny:sha256:...:REASON, or deny::REASON without a digest); "+
			"or edit:sha256:...:PATCH, an approval with changes; or answer::TEXT, an answer to the agent's question", value)
	}
	if n := utf8.RuneCountInString(a.Reason); n > MaxApprovalReason {
		return ApprovalAnswer{}, fmt.Errorf("the reason given with %s is %d characters long; a reason may have at most %d: "+
			"say it shorter", a.Decision, n, MaxApprovalReason)
	}
	return a, nil
}

// checkEdit refuses an approval with changes that names no digest, or
// whose patch CheckEdit refuses.
func checkEdit(value string, a ApprovalAnswer) error {
	if a.Digest == "" {
		return fmt.Errorf("%q changes arguments it does not name: an approval with changes is edit:DIGEST:PATCH, "+
			"with the argumentsDigest of the call as you were shown it", value)
	}
	return CheckEdit(a.Edit)
}

// CheckEdit refuses the changes of an approval (its PATCH) that are not a
// JSON object of at most MaxApprovalEdit characters.
func CheckEdit(patch string) error {
	if n := utf8.RuneCountInString(patch); n > MaxApprovalEdit {
		return fmt.Errorf("the changes given with edit are %d characters long; a patch may have at most %d: change fewer arguments", n, MaxApprovalEdit)
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(patch), &obj); err != nil || obj == nil {
		return fmt.Errorf("the changes given with edit (%q) are not a JSON object: an approval with changes is edit:DIGEST:PATCH, "+
			`PATCH a JSON merge patch such as {"amount_minor":8240}`, patch)
	}
	return nil
}

// String is the annotation value of the answer: the decision, ":" and the
// digest when it names one, and ":" and the reason when it gives one (with
// an empty digest before it when it names none: deny::REASON). A digest
// is written as status gives it, sha256:<hex>. An answer with an edit is
// edit:DIGEST:PATCH.
func (a ApprovalAnswer) String() string {
	switch {
	case a.Edit != "":
		return approvalEditWord + ":" + a.Digest + ":" + a.Edit
	case a.Reason != "":
		return string(a.Decision) + ":" + a.Digest + ":" + a.Reason
	case a.Digest != "" && strings.TrimRightFunc(a.Digest, unicode.IsSpace) != a.Digest:
		// Read from deny:a:\n: the colon after the digest keeps the space
		// that ends it, which the reader trims from the end of a value.
		return string(a.Decision) + ":" + a.Digest + ":"
	case a.Digest != "":
		return string(a.Decision) + ":" + a.Digest
	}
	return string(a.Decision)
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
