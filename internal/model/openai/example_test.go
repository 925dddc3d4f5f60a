package openai_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"

	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/model"
	"github.com/agentrun/agentrun/internal/model/openai"
)

// A provider for an OpenAI-compatible server (here a stand-in for vLLM),
// asked one question.
func Example() {
	vllm := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"chatcmpl-1","object":"chat.completion","created":1757412210,"model":"llama-3.1-8b-instruct",
			"choices":[{"index":0,"message":{"role":"assistant","content":"Two charges; one is a duplicate."},"finish_reason":"stop"}],
			"usage":{"prompt_tokens":31,"completion_tokens":9,"total_tokens":40}}`)
	}))
	defer vllm.Close()

	m, err := openai.New(model.Config{
		BaseURL:   vllm.URL + "/v1",
		Model:     "llama-3.1-8b-instruct",
		KeySource: model.StaticKey("token-for-vllm"),
		OnRetry: func(attempt, status int, err error) {
			fmt.Printf("retrying (attempt %d) after HTTP %d: %v\n", attempt, status, err)
		},
	})
	if err != nil {
		panic(err)
	}
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "Was the customer charged twice?"}}}
	reply, err := m.Complete(context.Background(), req)
	if err != nil {
		panic(err)
	}
	fmt.Println(reply.Content)
	fmt.Println("input tokens:", reply.Usage.InputTokens, "estimated at most:", loop.ByteEstimator{}.EstimateInputTokens(req))
	// Output:
	// Two charges; one is a duplicate.
	// input tokens: 31 estimated at most: 111
}
