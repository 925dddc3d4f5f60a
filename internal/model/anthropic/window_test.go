package anthropic

import "testing"

func TestContextWindow_namesOfTheAPIVertexAndBedrock(t *testing.T) {
	for name, want := range map[string]int64{
		"claude-sonnet-4-5": 200_000, "claude-3-5-haiku-20241022": 200_000,
		"claude-sonnet-4@20250514": 200_000, "claude-3-5-sonnet-v2@20241022": 200_000,
		"anthropic.claude-3-5-sonnet-20240620-v1:0": 200_000, "us.anthropic.claude-sonnet-4-20250514-v1:0": 200_000,
		"global.anthropic.claude-opus-4-1-20250805-v1:0": 200_000,
		"amazon.nova-pro-v1:0":                           0, "meta.llama3-70b-instruct-v1:0": 0, "": 0,
	} {
		if got := ContextWindow(name); got != want {
			t.Errorf("ContextWindow(%q) = %d, want %d", name, got, want)
		}
	}
}
