package model_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/agentrun/agentrun/internal/model"
)

// The key is read at every call, so a Secret that changes takes effect on
// the next model call. The operator's KeySource reads the Secret named by
// spec.model.apiKeySecretRef; this one reads a map.
func ExampleKeySource() {
	secrets := map[string]string{"openai/api-key": "sk-example"}
	var keys model.KeySource = func(ctx context.Context) (string, error) {
		key, ok := secrets["openai/api-key"]
		if !ok {
			return "", errors.New(`secret "openai" has no key "api-key"`)
		}
		return key, nil
	}
	key, _ := keys(context.Background())
	fmt.Println(len(key) > 0)
	// Output: true
}

// A provider that stays unavailable returns a *ProviderError; the run ends
// as ToolFailure with its text as the reason.
func ExampleProviderError() {
	var err error = &model.ProviderError{Provider: "openai", Status: 503, Attempts: 4, Message: "The engine is currently overloaded."}

	var pe *model.ProviderError
	if errors.As(err, &pe) {
		fmt.Println(pe.Status, pe.Attempts)
	}
	fmt.Println(err)
	// Output:
	// 503 4
	// openai: HTTP 503 after 4 attempts: The engine is currently overloaded.
}
