package crd_test

import (
	"testing"

	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// tmpl is an AgentRunTemplate manifest named name whose spec is spec (YAML
// indented two spaces).
func tmpl(name, spec string) string { return manifest("AgentRunTemplate", name, spec) }

const tmplRun = `  run:
    goal: "Investigate $(params.ticket)."
    model: {provider: scripted, name: "$(params.model)", script: [{content: done}]}
    budget: {maxTurns: 3}
`

// fromTemplate is an AgentRun named name made from a template, with spec
// lines added after templateRef.
func fromTemplate(name, more string) string {
	return `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: ` + name + `}
spec:
  templateRef: {name: investigator}
` + more
}

func TestAgentRunTemplate_acceptsValidManifests(t *testing.T) {
	ctx := testContext(t)
	for _, m := range []string{
		tmpl("investigator", `  parameters:
  - {name: ticket, required: true, pattern: '^T-[0-9]+$', description: "The ticket."}
  - {name: model, enum: [small, large], default: small}
`+tmplRun),
		tmpl("no-parameters", tmplRun),
		fromTemplate("t-1", "  parameters: [{name: ticket, value: T-1}, {name: model, value: large}]\n"),
		fromTemplate("t-2", "  ttlSecondsAfterFinished: 60\n"),
		// A follow-up of a run made from the template asks its own goal.
		fromTemplate("t-3", "  continueFrom: {name: t-1}\n  goal: \"And now?\"\n"),
	} {
		expectCreate(ctx, t, m, nil)
	}
}

func TestAgentRunTemplate_rejectsInvalidManifests(t *testing.T) {
	ctx := testContext(t)
	for _, tc := range []struct {
		name, manifest string
		wantErr        []string
	}{
		{"a required parameter with a default", tmpl("required-default", `  parameters: [{name: ticket, required: true, default: T-1}]
`+tmplRun), []string{"spec.parameters[0].default", "a required parameter takes no default"}},
		{"a default outside the enum", tmpl("enum-default", `  parameters: [{name: model, enum: [small, large], default: huge}]
`+tmplRun), []string{"the default of a parameter must be one of its enum values"}},
		{"a pattern that is not a regular expression", tmpl("bad-pattern", `  parameters: [{name: ticket, pattern: '^T-[0-9+$'}]
`+tmplRun), []string{"spec.parameters[0].pattern", "missing closing ]", "pattern must be a valid regular expression (RE2 syntax)"}},
		{"a parameter name that cannot be a placeholder", tmpl("bad-name", `  parameters: [{name: "1ticket"}]
`+tmplRun), []string{"spec.parameters[0].name"}},
		{"two parameters of the same name", tmpl("dup", `  parameters: [{name: ticket}, {name: ticket}]
`+tmplRun), []string{"spec.parameters[1]", "Duplicate value"}},
		{"a run without a goal", tmpl("no-goal", `  run:
    model: {provider: scripted, script: [{content: done}]}
    budget: {maxTurns: 3}
`), []string{"spec.run.goal", "Required value"}},
		{"a placeholder where a fixed value is expected", tmpl("placeholder-provider", `  run:
    goal: "Go."
    model: {provider: "$(params.provider)"}
    budget: {maxTurns: 3}
`), []string{"spec.run.model.provider", "Unsupported value"}},
		{"a run from a template that writes its own goal", fromTemplate("own-goal", "  goal: \"Do something else.\"\n"),
			[]string{"spec.goal", "a run made from a template (spec.templateRef) takes goal from the template, unless it is a follow-up (spec.continueFrom)"}},
		{"a run from a template that sets a tool", fromTemplate("own-tool", "  tools: [{name: shell, builtin: kubernetes.get}]\n"),
			[]string{"spec.tools", "takes tools from the template: set only templateRef, parameters, cancel and ttlSecondsAfterFinished"}},
		{"parameters without a template", `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: stray}
spec:
  goal: "Go."
  model: {provider: scripted}
  budget: {maxTurns: 1}
  parameters: [{name: ticket, value: T-1}]
`, []string{"spec.parameters", "apply only to a run made from a template"}},
		{"neither a goal nor a template", `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: nothing}
spec:
  model: {provider: scripted}
  budget: {maxTurns: 1}
`, []string{"spec.goal: Required value", "unless spec.templateRef names an AgentRunTemplate"}},
		{"an empty template name", `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: empty-ref}
spec:
  templateRef: {name: ""}
`, []string{"spec.templateRef.name"}},
	} {
		t.Run(tc.name, func(t *testing.T) { expectCreate(ctx, t, tc.manifest, tc.wantErr) })
	}
}

func TestAgentRunTemplate_aRunsTemplateAndParametersCannotChange(t *testing.T) {
	ctx := testContext(t)
	expectPatchRefused(ctx, t, fromTemplate("pinned", "  parameters: [{name: ticket, value: T-1}]\n"),
		`{"spec": {"parameters": [{"name": "ticket", "value": "T-2"}]}}`, "the spec of an AgentRun cannot change once created")
	expectPatchRefused(ctx, t, fromTemplate("pinned-ref", ""),
		`{"spec": {"templateRef": {"name": "other"}}}`, "the spec of an AgentRun cannot change once created")
}

// TestAgentRunTemplate_itsRunMayBeEdited: a template shares its run spec
// with AgentRun, whose fields are immutable; the template's are not.
func TestAgentRunTemplate_itsRunMayBeEdited(t *testing.T) {
	ctx := testContext(t)
	obj, err := create(ctx, tmpl("edited", `  parameters: [{name: ticket}, {name: model}]
`+tmplRun))
	if err != nil {
		t.Fatalf("Cannot create the template: %v", err)
	}
	for _, patch := range []string{
		`{"spec": {"run": {"goal": "Investigate $(params.ticket) again."}}}`,
		`{"spec": {"run": {"instructions": "Be brief.", "budget": {"maxTurns": 5}, "strategy": "planExecute"}}}`,
		`{"spec": {"run": {"approvalTimeout": "10m", "serviceAccountName": "reader", "context": {"maxInputTokens": 30000}}}}`,
		`{"spec": {"run": {"tools": [{"name": "get", "builtin": "kubernetes.get"}], "ttlSecondsAfterFinished": 60}}}`,
	} {
		if err := k8sClient.Patch(ctx, obj, client.RawPatch(types.MergePatchType, []byte(patch))); err != nil {
			t.Errorf("The API server refused an edit of the template's run %s: %v", patch, err)
		}
	}
}
