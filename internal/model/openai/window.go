package openai

import "strings"

// windows are the context windows, in tokens, of OpenAI models the
// adapter knows, by name prefix (the longest prefix that matches wins).
// For the GPT-5 family it is the input limit OpenAI documents (272,000),
// not the window of input and output together.
var windows = []struct {
	prefix string
	tokens int64
}{
	{"gpt-5", 272_000},
	{"gpt-4.1", 1_047_576},
	{"gpt-4o", 128_000},
	{"gpt-4-turbo", 128_000},
	{"gpt-4", 8_192},
	{"gpt-3.5-turbo", 16_385},
	{"o1", 200_000},
	{"o3", 200_000},
	{"o4-mini", 200_000},
}

// ContextWindow is the context window of the named model, or 0 when the
// adapter does not know it (a model served by vLLM, Ollama or LiteLLM
// under a name of its own).
func ContextWindow(name string) int64 {
	best, tokens := 0, int64(0)
	for _, w := range windows {
		if strings.HasPrefix(name, w.prefix) && len(w.prefix) > best {
			best, tokens = len(w.prefix), w.tokens
		}
	}
	return tokens
}
