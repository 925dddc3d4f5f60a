package crd_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/crdguard"
	"github.com/agentrun/agentrun/internal/testenv"
)

// TestAgentRunSpec_everySharedFieldIsPinned ties the rules an AgentRun
// states about the shared spec (AgentSpec) to its fields: every field a
// run made from a template cannot set has its own rule. A field added to
// AgentSpec without one fails here. (That no field but cancel and
// ttlSecondsAfterFinished changes after creation needs no list: the
// policy agentrun-spec compares every field; TestUpdate_onlyCancelMayChange.)
func TestAgentRunSpec_everySharedFieldIsPinned(t *testing.T) {
	spec := testenv.AgentRunSchema(t).Properties["spec"]
	var fromTemplate []string
	for _, v := range spec.XValidations {
		field := strings.TrimPrefix(v.FieldPath, ".")
		if strings.HasPrefix(createdRule(t, v.Rule), "!has(self.templateRef) || !has(self."+field+")") {
			fromTemplate = append(fromTemplate, field)
		}
	}
	// What the API server may default on a run (policy, loopDetection) or
	// what a run may set for itself (ttlSecondsAfterFinished) is not
	// refused with a template; the operator takes the template's.
	settable := []string{"approvalTimeout", "loopDetection", "policy", "ttlSecondsAfterFinished"}
	var wantFromTemplate []string
	st := reflect.TypeFor[agentsv1alpha1.AgentSpec]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if !slices.Contains(settable, name) {
			wantFromTemplate = append(wantFromTemplate, name)
		}
	}
	for _, l := range [][]string{fromTemplate, wantFromTemplate} {
		slices.Sort(l)
	}
	if d := cmp.Diff(wantFromTemplate, fromTemplate); d != "" {
		t.Errorf("spec fields a run made from a template may not set (-want +got):\n%s", d)
	}
}

// createdRule is a rule of the AgentRun CRD as written in api/: make
// manifests (hack/crdguard) wraps the spec's rules so that they are
// checked when a run is created only. A spec rule without the wrapping
// fails the test: it would run again at every status write.
func createdRule(t *testing.T, rule string) string {
	t.Helper()
	orig, ok := crdguard.Unwrapped(rule)
	if !ok {
		t.Errorf("spec rule %q is not checked on create only: run make manifests", rule)
	}
	return orig
}
