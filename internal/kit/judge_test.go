package kit

import (
	"context"
	"strings"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// An evaluation's judge is built as a run's model is: a scripted judge
// plays its script, its prices are parsed, and a provider the run's
// model could not use (no key, an identity not lent) is refused with the
// judge's field named.
func TestJudge_buildsTheModelAsARunsModel(t *testing.T) {
	spec := &v1alpha1.ModelSpec{ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted,
		Pricing: &v1alpha1.ModelPricing{Input: "1", Output: "2"}},
		Script: []v1alpha1.ScriptStep{{Content: `{"score": 5, "rationale": "ok"}`}}}
	m, p, err := (&Builder{}).Judge(context.Background(), "team-a", spec)
	if err != nil {
		t.Fatal(err)
	}
	reply, err := m.Complete(context.Background(), &loop.Request{})
	if err != nil || reply.Content != `{"score": 5, "rationale": "ok"}` || p.Input != loop.MustMoney("1") || p.Output != loop.MustMoney("2") {
		t.Errorf("scripted judge: reply %+v, %v, pricing %+v; want its script's entry and $1/$2", reply, err, p)
	}

	tests := []struct {
		spec v1alpha1.ModelEndpoint
		want string
	}{
		{v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderAnthropic, Name: "claude-haiku-4-5"},
			"judge.model: model.apiKeySecretRef is required with provider anthropic"},
		{v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderBedrock, Name: "m", Bedrock: &v1alpha1.BedrockModel{Region: "us-east-1"}},
			"judge.model: provider bedrock without an API key calls as the operator's AWS identity"},
		{v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted, Pricing: &v1alpha1.ModelPricing{Input: "x"}},
			"judge.model.pricing.input"},
	}
	for _, tt := range tests {
		_, _, err := (&Builder{}).Judge(context.Background(), "team-a", &v1alpha1.ModelSpec{ModelEndpoint: tt.spec})
		if err == nil || !strings.HasPrefix(err.Error(), tt.want) {
			t.Errorf("%s: %v; want an error starting %q", tt.spec.Provider, err, tt.want)
		}
	}
}
