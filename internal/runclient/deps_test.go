package runclient_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
)

// What the plugin and the console do to a run needs the API types and a
// client, nothing of the operator's (issue 44: the plugin linked every
// executor and provider).
func TestRunclient_importsTheAPITypesAndNothingElseOfOurs(t *testing.T) {
	var ours []string
	for _, d := range testenv.Deps(t) {
		if strings.HasPrefix(d, "github.com/agentrun/agentrun/") {
			ours = append(ours, d)
		}
	}
	slices.Sort(ours)
	want := []string{"github.com/agentrun/agentrun/api/v1alpha1", "github.com/agentrun/agentrun/internal/runclient"}
	if diff := cmp.Diff(want, ours); diff != "" {
		t.Errorf("runclient's packages of this module (-want +got):\n%s", diff)
	}
}
