package anthropic

import "strings"

// ContextWindow is the context window of the named Claude model, or 0
// when the adapter does not know it. Every Claude 3 and 4 model has a
// window of 200,000 tokens (a longer one is a beta the adapter does not
// ask for). The name may be the Anthropic API's (claude-sonnet-4-5), a
// Vertex AI model's (claude-sonnet-4@20250514) or a Bedrock model or
// inference profile id (us.anthropic.claude-sonnet-4-20250514-v1:0).
func ContextWindow(name string) int64 {
	if _, after, ok := strings.Cut(name, "anthropic."); ok {
		name = after
	}
	for _, p := range []string{"claude-3", "claude-sonnet-4", "claude-opus-4", "claude-haiku-4", "claude-4"} {
		if strings.HasPrefix(name, p) {
			return 200_000
		}
	}
	return 0
}
