package kit

import (
	"strings"
	"testing"

	"github.com/agentrun/agentrun/internal/loop"
)

// The limit a run's requests are held to: spec.context.maxInputTokens when
// set, else the model's window less the output a request allows when the
// adapter knows the model, else the documented default.
func TestConfig_contextLimitAndWhereItCameFrom(t *testing.T) {
	cases := []struct {
		name, provider, model, context string
		want                           int64
		source                         string
		fallbacks                      string
	}{
		{"set in the spec", "openai", "gpt-4o", "{maxInputTokens: 30000}", 30_000, loop.ContextFromSpec, ""},
		{"a known OpenAI model", "openai", "gpt-4o-mini", "", 128_000 - 4096, loop.ContextFromModel, ""},
		{"a known Claude model", "anthropic", "claude-sonnet-4-5", "{strategy: summarize}", 200_000 - 4096, loop.ContextFromModel, ""},
		{"Claude on Bedrock", "bedrock", "us.anthropic.claude-sonnet-4-20250514-v1:0", "", 200_000 - 4096, loop.ContextFromModel, ""},
		{"Claude on Vertex AI", "vertex", "claude-sonnet-4@20250514", "", 200_000 - 4096, loop.ContextFromModel, ""},
		{"an Azure deployment named after its model", "azure", "gpt-4.1-mini", "", 1_047_576 - 4096, loop.ContextFromModel, ""},
		{"an Azure deployment of a name of its own", "azure", "prod-chat", "", loop.DefaultMaxInputTokens, loop.ContextFromDefault, ""},
		{"a script, which has no window", "scripted", "", "", 10_000_000, loop.ContextFromModel, ""},
		{"a model served under a name of its own", "openai", "llama-3.1-70b", "", loop.DefaultMaxInputTokens, loop.ContextFromDefault, ""},
		{"a fallback with a smaller window", "anthropic", "claude-sonnet-4-5", "", 128_000 - 4096, loop.ContextFromModel,
			"[{provider: openai, name: gpt-4o-mini, baseURL: 'http://a.example.com'}]"},
		{"fallbacks with larger windows", "openai", "gpt-4o-mini", "", 128_000 - 4096, loop.ContextFromModel,
			"[{provider: anthropic, name: claude-sonnet-4-5, apiKeySecretRef: {name: a, key: k}}]"},
		{"a fallback of an unknown window", "anthropic", "claude-sonnet-4-5", "", loop.DefaultMaxInputTokens, loop.ContextFromDefault,
			"[{provider: openai, name: llama-3.1-70b, baseURL: 'http://a.example.com'}]"},
		{"the spec's limit, with fallbacks", "anthropic", "claude-sonnet-4-5", "{maxInputTokens: 30000}", 30_000, loop.ContextFromSpec,
			"[{provider: openai, name: gpt-4o-mini, baseURL: 'http://a.example.com'}]"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			fallbacks := ""
			if tc.fallbacks != "" {
				fallbacks = ", fallbacks: " + tc.fallbacks
			}
			manifest := "metadata: {name: r}\nspec:\n  goal: g\n  model: {provider: " + tc.provider + ", name: " + tc.model + fallbacks + "}\n  budget: {maxTurns: 3}\n"
			if tc.context != "" {
				manifest += "  context: " + tc.context + "\n"
			}
			run := parse(t, manifest)
			cfg, err := Config(&run.Spec)
			if err != nil {
				t.Fatal(err)
			}
			e, err := loop.New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			got := e.Convergence(&loop.State{}).Context
			if got.MaxInputTokens != tc.want || got.Source != tc.source {
				t.Errorf("maxInputTokens %d from %q; want %d from %q", got.MaxInputTokens, got.Source, tc.want, tc.source)
			}
		})
	}
}

func TestConfig_refusesAContextPolicyTheSchemaRefuses(t *testing.T) {
	for policy, want := range map[string]string{
		"{strategy: truncate}":                             `context.strategy must be clear or summarize, not "truncate"`,
		"{keepRecentTurns: 0}":                             "context.keepRecentTurns must be between 1 and 1000",
		"{maxInputTokens: 10}":                             "context.maxInputTokens must be between 1024 and 10000000",
		"{summaryMaxOutputTokens: 500}":                    "context.summaryMaxOutputTokens applies to strategy summarize only",
		"{strategy: summarize, summaryMaxOutputTokens: 1}": "context.summaryMaxOutputTokens must be between 64 and 32768",
	} {
		run := parse(t, "metadata: {name: r}\nspec:\n  goal: g\n  model: {provider: scripted, script: [{content: x}]}\n  budget: {maxTurns: 3}\n  context: "+policy+"\n")
		if _, err := Config(&run.Spec); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: error %v; want %q", policy, err, want)
		}
	}
}
