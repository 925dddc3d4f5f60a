package crd_test

import (
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/testenv"
)

// TestAgentRunSpec_everySharedFieldIsPinned ties the rules an AgentRun
// states about the shared spec (AgentSpec) to its fields: every field but
// ttlSecondsAfterFinished is immutable, and every field a run made from a
// template cannot set has its own rule. A field added to AgentSpec (or to
// the run's own fields) without them fails here.
func TestAgentRunSpec_everySharedFieldIsPinned(t *testing.T) {
	spec := testenv.AgentRunSchema(t).Properties["spec"]
	var immutable, fromTemplate []string
	for _, v := range spec.XValidations {
		field := strings.TrimPrefix(v.FieldPath, ".")
		switch {
		case strings.Contains(v.Rule, "oldSelf."+field+")") && strings.Contains(v.Message, specChangeRefused):
			immutable = append(immutable, field)
		case strings.HasPrefix(v.Rule, "!has(self.templateRef) || !has(self."+field+")"):
			fromTemplate = append(fromTemplate, field)
		}
	}
	// What the API server may default on a run (policy, loopDetection) or
	// what a run may set for itself (ttlSecondsAfterFinished) is not
	// refused with a template; the operator takes the template's.
	settable := []string{"approvalTimeout", "loopDetection", "policy", "ttlSecondsAfterFinished"}
	var wantImmutable, wantFromTemplate []string
	st := reflect.TypeFor[agentsv1alpha1.AgentSpec]()
	for i := range st.NumField() {
		name, _, _ := strings.Cut(st.Field(i).Tag.Get("json"), ",")
		if name != "ttlSecondsAfterFinished" {
			wantImmutable = append(wantImmutable, name)
		}
		if !slices.Contains(settable, name) {
			wantFromTemplate = append(wantFromTemplate, name)
		}
	}
	// The run's own fields (templateRef, parameters, continueFrom) are
	// immutable too, but cancel, which may be set to true.
	rt := reflect.TypeFor[agentsv1alpha1.AgentRunSpec]()
	for i := range rt.NumField() {
		name, _, _ := strings.Cut(rt.Field(i).Tag.Get("json"), ",")
		if !rt.Field(i).Anonymous && name != "cancel" {
			wantImmutable = append(wantImmutable, name)
		}
	}
	for _, l := range [][]string{immutable, fromTemplate, wantImmutable, wantFromTemplate} {
		slices.Sort(l)
	}
	if d := cmp.Diff(wantImmutable, immutable); d != "" {
		t.Errorf("spec fields with an immutability rule (-want +got):\n%s", d)
	}
	if d := cmp.Diff(wantFromTemplate, fromTemplate); d != "" {
		t.Errorf("spec fields a run made from a template may not set (-want +got):\n%s", d)
	}
}
