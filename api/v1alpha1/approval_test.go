package v1alpha1_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/google/go-cmp/cmp"
)

func TestParseApprovalAnswer(t *testing.T) {
	for _, tc := range []struct {
		value   string
		want    v1alpha1.ApprovalAnswer
		wantErr bool
	}{
		{value: "approve", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}},
		{value: "deny", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny}},
		{value: "stop", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalStop}},
		{value: " Deny\n", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny}},
		{value: "APPROVE:SHA256:AB12", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:ab12"}},
		// Only ASCII letters are folded, as CEL's lowerAscii folds them.
		{value: "approve:sha256:ÄB12", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:Äb12"}},
		{value: "approve:sha256:ab12 ", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:ab12"}},
		// The digest is two fields (sha256:<hex>); a colon after it
		// starts the reason, which is everything after it, colons and
		// line breaks included, its case kept and space around it removed.
		{value: "approve:sha256:ab:12", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:ab", Reason: "12"}},
		{value: "DENY:SHA256:AB12: Not 824.00: refund 82.40 (the invoice).\nAsk Finance first. ",
			want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Digest: "sha256:ab12", Reason: "Not 824.00: refund 82.40 (the invoice).\nAsk Finance first."}},
		// An empty digest names none: the reason follows it.
		{value: "deny::Use the EU endpoint: eu.example.com", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: "Use the EU endpoint: eu.example.com"}},
		{value: "deny::", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny}},
		{value: "deny:sha256:ab12:", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Digest: "sha256:ab12"}},
		{value: "stop::" + strings.Repeat("é", v1alpha1.MaxApprovalReason), want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalStop,
			Reason: strings.Repeat("é", v1alpha1.MaxApprovalReason)}},
		// An empty digest names none.
		{value: "approve:", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove}},
		// Space inside the value is not trimmed: it names another digest.
		{value: "approve: sha256:ab12", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: " sha256:ab12"}},
		// An approval with changes: the digest the person was shown, then
		// a JSON merge patch, colons and all.
		{value: `EDIT:sha256:AB12: {"amount_minor":8240,"note":"a:b"} `, want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove,
			Digest: "sha256:ab12", Edit: `{"amount_minor":8240,"note":"a:b"}`}},
		{value: "edit:sha256:ab12:{}", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:ab12", Edit: "{}"}},
		// An answer to the agent's question: its text is the reason.
		{value: "Answer::in_9f21: the March one", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalReply, Reason: "in_9f21: the March one"}},
		{value: "answer:sha256:ab12:yes", want: v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalReply, Digest: "sha256:ab12", Reason: "yes"}},
		{value: "", wantErr: true},
		{value: "maybe", wantErr: true},
		{value: "approve :sha256:ab12", wantErr: true},
		{value: ":sha256:ab12", wantErr: true},
		{value: "approved", wantErr: true},
	} {
		got, err := v1alpha1.ParseApprovalAnswer(tc.value)
		if (err != nil) != tc.wantErr {
			t.Fatalf("ParseApprovalAnswer(%q): error %v, want error %v", tc.value, err, tc.wantErr)
		}
		if err != nil && !strings.Contains(err.Error(), "approve, deny or stop") {
			t.Errorf("ParseApprovalAnswer(%q): error %q does not say what an answer is", tc.value, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("ParseApprovalAnswer(%q) (-want +got):\n%s", tc.value, diff)
		}
	}
}

func TestApprovalAnswer_StringIsReadBack(t *testing.T) {
	for _, a := range []v1alpha1.ApprovalAnswer{
		{Decision: v1alpha1.ApprovalApprove},
		{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e"},
		{Decision: v1alpha1.ApprovalDeny},
		{Decision: v1alpha1.ApprovalStop},
		{Decision: v1alpha1.ApprovalDeny, Reason: "not 824.00: 82.40"},
		{Decision: v1alpha1.ApprovalDeny, Digest: "sha256:0b1e", Reason: "a: b\n\nc:"},
		{Decision: v1alpha1.ApprovalStop, Digest: "sha256:0b1e", Reason: "::"},
		{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Edit: `{"a":{"b":":"},"c":null}`},
	} {
		got, err := v1alpha1.ParseApprovalAnswer(a.String())
		if err != nil {
			t.Fatalf("%q: %v", a.String(), err)
		}
		if diff := cmp.Diff(a, got); diff != "" {
			t.Errorf("%q read back (-want +got):\n%s", a.String(), diff)
		}
	}
	for _, tc := range []struct {
		a    v1alpha1.ApprovalAnswer
		want string
	}{
		{v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e"}, "approve:sha256:0b1e"},
		{v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Reason: "too much"}, "deny::too much"},
		{v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalDeny, Digest: "sha256:0b1e", Reason: "too much"}, "deny:sha256:0b1e:too much"},
		{v1alpha1.ApprovalAnswer{Decision: v1alpha1.ApprovalApprove, Digest: "sha256:0b1e", Edit: `{"n":1}`}, `edit:sha256:0b1e:{"n":1}`},
	} {
		if got := tc.a.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.a, got, tc.want)
		}
	}
}

// A reason is bounded: one character past MaxApprovalReason makes the
// value no answer, with a message that says how long it may be.
func TestParseApprovalAnswer_reasonIsBounded(t *testing.T) {
	long := strings.Repeat("é", v1alpha1.MaxApprovalReason+1)
	for _, v := range []string{"deny::" + long, "deny:sha256:ab12:" + long} {
		_, err := v1alpha1.ParseApprovalAnswer(v)
		if err == nil || !strings.Contains(err.Error(), "at most 1024") {
			t.Errorf("a reason of %d characters: error %v, want one that says at most 1024", v1alpha1.MaxApprovalReason+1, err)
		}
	}
}

// An approval with changes names the digest it changes, and its patch is
// a bounded JSON object; anything else is no answer, with a message that
// says what an edit is.
func TestParseApprovalAnswer_editsAndAnswersAreChecked(t *testing.T) {
	long := `{"note":"` + strings.Repeat("é", v1alpha1.MaxApprovalEdit) + `"}`
	for _, tc := range []struct{ value, want string }{
		{`edit::{"n":1}`, "changes arguments it does not name"},
		{`edit:{"n":1}`, "not a JSON object"}, // the patch read as the digest
		{"edit:sha256:ab12", "not a JSON object"},
		{"edit:sha256:ab12:[1]", "not a JSON object"},
		{"edit:sha256:ab12:null", "not a JSON object"},
		{`edit:sha256:ab12:{"n":`, "not a JSON object"},
		{"edit:sha256:ab12:" + long, "at most 4096"},
		{"answer:: ", "gives no answer"},
		{"answer", "gives no answer"},
	} {
		_, err := v1alpha1.ParseApprovalAnswer(tc.value)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("ParseApprovalAnswer(%q): error %v, want one that says %q", short(tc.value), err, tc.want)
		}
	}
}

func short(v string) string {
	if len(v) > 60 {
		return v[:60] + "…"
	}
	return v
}

// The approval annotation's value has one codec (approval.go): a Go file
// that names the annotation and splits or joins on a colon is reading or
// writing the value by hand. The CEL reading of it is tied to the codec by
// TestAdmission_readsTheAnswerAsTheOperatorDoes in
// internal/controller.
func TestApprovalAnswer_noOtherCodec(t *testing.T) {
	root := filepath.Join("..", "..")
	var found []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			switch d.Name() {
			case ".git", "bin", "dist", "testdata", "node_modules", ".dev", ".e2e":
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Base(path) == "approval.go" {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		names, colons := false, 0
		ast.Inspect(f, func(n ast.Node) bool {
			switch n := n.(type) {
			case *ast.SelectorExpr:
				names = names || n.Sel.Name == "ApprovalAnnotationPrefix"
			case *ast.BasicLit:
				if n.Value == `":"` || n.Value == `':'` {
					colons++
				}
			}
			return true
		})
		if names && colons > 0 {
			found = append(found, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(found) > 0 {
		t.Fatalf("these files name ApprovalAnnotationPrefix and split or join on \":\": read and write the value with "+
			"v1alpha1.ParseApprovalAnswer and ApprovalAnswer.String instead:\n%s", strings.Join(found, "\n"))
	}
}

// Whatever value the codec takes for an answer, String writes it so that
// it is read back the same: the one codec is its own inverse, reasons with
// colons and line breaks included.
func FuzzParseApprovalAnswer(f *testing.F) {
	for _, v := range []string{"approve", " Deny\n", "approve:sha256:ab12", "deny::a: b\nc", "deny:sha256:ab12:x:y",
		"stop:other", "deny:sha256:", "deny: a:b: r ", "approve::", "deny:::", `edit:sha256:ab12:{"a":":"}`,
		"deny:a:\n:"} {
		f.Add(v)
	}
	f.Fuzz(func(t *testing.T, v string) {
		a, err := v1alpha1.ParseApprovalAnswer(v)
		if err != nil {
			return
		}
		back, err := v1alpha1.ParseApprovalAnswer(a.String())
		if err != nil {
			t.Fatalf("%q read as %+v, written %q, which is no answer: %v", v, a, a.String(), err)
		}
		if diff := cmp.Diff(a, back); diff != "" {
			t.Fatalf("%q read as %+v, written %q, read back (-first +back):\n%s", v, a, a.String(), diff)
		}
	})
}
