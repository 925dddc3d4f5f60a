package openai

import "testing"

func TestContextWindow_longestKnownPrefixWins(t *testing.T) {
	for name, want := range map[string]int64{
		"gpt-4o-mini": 128_000, "gpt-4.1-nano": 1_047_576, "gpt-4-0613": 8_192, "gpt-5.1": 272_000,
		"o4-mini-2025-04-16": 200_000, "llama-3.1-70b": 0, "": 0,
	} {
		if got := ContextWindow(name); got != want {
			t.Errorf("ContextWindow(%q) = %d, want %d", name, got, want)
		}
	}
}
