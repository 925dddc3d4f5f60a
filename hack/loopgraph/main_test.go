package main

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// The shape issue 43 asks of internal/loop, held so that it does not
// drift back: only engine.go ends a turn or a run, Engine has at most 45
// methods, and at most 15 references between its files run back up.
func TestLoopShape(t *testing.T) {
	got, err := measure("../../internal/loop")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"engine.go"}, got.finishers); diff != "" {
		t.Errorf("files calling Engine.finish (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"engine.go"}, got.turnEnders); diff != "" {
		t.Errorf("files calling Engine.endTurn (-want +got):\n%s", diff)
	}
	if got.methods > 45 {
		t.Errorf("Engine has %d methods, want at most 45", got.methods)
	}
	if got.backUp > 15 {
		t.Errorf("%d references run back up, want at most 15:\n%s", got.backUp, strings.Join(got.pairs, "\n"))
	}
}
