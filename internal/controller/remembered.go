package controller

import (
	"encoding/json"
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// ReasonRemembered is the event of a memory.remember call that wrote an
// entry: it names the entry's key and memory, never its text (which is in
// the transcript only).
const ReasonRemembered = "Remembered"

// emitRemembered records a Remembered event for each memory.remember call
// this save finished with an entry written, whatever the event verbosity:
// it is a write that outlives the run.
func (r *AgentRunReconciler) emitRemembered(obj *v1alpha1.AgentRun, c change) {
	if c.state == nil || c.run.Spec.Memory == nil {
		return
	}
	for _, n := range c.notes {
		if n.Kind != loop.NoteCallFinished || n.Warning || n.CallID == "" {
			continue
		}
		// The save's results are the transcript's newest messages.
		i := len(c.state.Transcript) - 1
		for i >= 0 && (c.state.Transcript[i].Role != loop.RoleTool || c.state.Transcript[i].CallID != n.CallID) {
			i--
		}
		if i < 0 {
			continue
		}
		m := c.state.Transcript[i]
		if m.Status != loop.ObsOK || !remembers(&c.run.Spec, m.Tool) {
			continue
		}
		var res struct {
			Remembered string `json:"remembered"`
			Replaced   bool   `json:"replaced"`
		}
		if json.Unmarshal([]byte(m.Content), &res) != nil || res.Remembered == "" {
			continue
		}
		verb := "wrote"
		if res.Replaced {
			verb = "replaced"
		}
		r.event(obj, corev1.EventTypeNormal, ReasonRemembered, ReasonRemembered+" "+n.CallID,
			fmt.Sprintf("call %s (%s) %s the entry %q of memory %s", n.CallID, m.Tool, verb, res.Remembered, c.run.Spec.Memory.Name))
	}
}

// remembers says whether the spec's tool of this name is memory.remember.
func remembers(spec *v1alpha1.AgentRunSpec, tool string) bool {
	return slices.ContainsFunc(spec.Tools, func(t v1alpha1.ToolSpec) bool {
		return t.Name == tool && t.Builtin == v1alpha1.BuiltinMemoryRemember
	})
}
