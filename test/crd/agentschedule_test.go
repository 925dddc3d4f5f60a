package crd_test

import (
	"strings"
	"testing"

	agentsv1alpha1 "github.com/agentrun/agentrun/api/v1alpha1"
)

// schedule is an AgentSchedule manifest named name whose spec is spec (YAML
// indented two spaces).
func schedule(name, spec string) string { return manifest("AgentSchedule", name, spec) }

func TestAgentSchedule_acceptsValidManifests(t *testing.T) {
	cases := []struct{ name, manifest string }{
		{"a template and its parameters", schedule("crd-nightly", `
  schedule: "0 2 * * *"
  timeZone: Europe/Berlin
  concurrencyPolicy: Forbid
  startingDeadlineSeconds: 300
  runTemplate:
    metadata: {labels: {team: payments}}
    templateRef: {name: refund-investigator}
    parameters: [{name: ticket, value: T-1}]
`)},
		{"a whole run spec", schedule("hourly-check", `
  schedule: "@hourly"
  runTemplate:
    spec:
      goal: "Check the queue."
      model: {provider: scripted, script: [{content: "ok"}]}
      budget: {maxTurns: 2}
`)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, nil)
		})
	}
}

// The defaults are CronJob's: Allow, three successful runs kept, one
// failed.
func TestAgentSchedule_defaults(t *testing.T) {
	s := created(testContext(t), t, schedule("defaulted", `
  schedule: "*/5 * * * *"
  runTemplate: {templateRef: {name: refund-investigator}}
`), &agentsv1alpha1.AgentSchedule{})
	sp := s.Spec
	if sp.ConcurrencyPolicy != agentsv1alpha1.AllowConcurrent || sp.SuccessfulRunsHistoryLimit == nil || *sp.SuccessfulRunsHistoryLimit != 3 ||
		sp.FailedRunsHistoryLimit == nil || *sp.FailedRunsHistoryLimit != 1 {
		t.Fatalf("defaults: %+v", sp)
	}
}

func TestAgentSchedule_rejectsInvalidManifests(t *testing.T) {
	cases := []struct {
		name, manifest string
		wantErr        []string
	}{
		{"both templateRef and spec", schedule("both", `
  schedule: "@daily"
  runTemplate:
    templateRef: {name: refund-investigator}
    spec:
      goal: "Check the queue."
      model: {provider: scripted}
      budget: {maxTurns: 2}
`), []string{"runTemplate needs either templateRef (with parameters) or spec, not both"}},
		{"neither templateRef nor spec", schedule("neither", `
  schedule: "@daily"
  runTemplate: {metadata: {labels: {team: payments}}}
`), []string{"runTemplate needs either templateRef (with parameters) or spec, not both"}},
		{"parameters without a template", schedule("stray-params", `
  schedule: "@daily"
  runTemplate:
    parameters: [{name: ticket, value: T-1}]
    spec:
      goal: "Check the queue."
      model: {provider: scripted}
      budget: {maxTurns: 2}
`), []string{"runTemplate.parameters apply only with runTemplate.templateRef"}},
		{"a concurrency policy outside the enum", schedule("sometimes", `
  schedule: "@daily"
  concurrencyPolicy: Sometimes
  runTemplate: {templateRef: {name: refund-investigator}}
`), []string{"spec.concurrencyPolicy", `supported values: "Allow", "Forbid", "Replace"`}},
		{"a negative starting deadline", schedule("negative", `
  schedule: "@daily"
  startingDeadlineSeconds: -1
  runTemplate: {templateRef: {name: refund-investigator}}
`), []string{"spec.startingDeadlineSeconds"}},
		{"an empty schedule", schedule("empty", `
  schedule: ""
  runTemplate: {templateRef: {name: refund-investigator}}
`), []string{"spec.schedule"}},
		{"a name too long for its runs' names", schedule(strings.Repeat("a", 53), `
  schedule: "@daily"
  runTemplate: {templateRef: {name: refund-investigator}}
`), []string{"the name of an AgentSchedule is at most 52 characters"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			expectCreate(testContext(t), t, tc.manifest, tc.wantErr)
		})
	}
}
