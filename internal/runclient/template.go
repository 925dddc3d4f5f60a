package runclient

import "github.com/agentrun/agentrun/api/v1alpha1"

// FromTemplate is the spec of a run made from the AgentRunTemplate named
// template with params, as kubectl agentrun run --template, an
// AgentSchedule and an AgentEvaluation make it: the operator resolves the
// template and checks the parameters when the run starts.
func FromTemplate(template string, params []v1alpha1.ParameterValue) v1alpha1.AgentRunSpec {
	spec := v1alpha1.AgentRunSpec{TemplateRef: &v1alpha1.TemplateRef{Name: template}}
	for _, p := range params {
		spec.Parameters = append(spec.Parameters, *p.DeepCopy())
	}
	return spec
}
