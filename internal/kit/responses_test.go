package kit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
)

// spec.model.api picks the API of provider openai, for the model and each
// fallback alike.
func TestBuild_modelAPIPicksTheEndpoint(t *testing.T) {
	paths := make(chan string, 4)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths <- r.URL.Path
		w.Header().Set("Content-Type", "application/json")
		if r.URL.Path == "/v1/responses" {
			fmt.Fprint(w, `{"id":"resp_1","object":"response","status":"completed","model":"m","output":[{"id":"msg_1","type":"message","role":"assistant","status":"completed",`+
				`"content":[{"type":"output_text","text":"hello","annotations":[]}]}],"usage":{"input_tokens":1,"output_tokens":1,"total_tokens":2}}`)
			return
		}
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	}))
	defer srv.Close()
	b := loopbackBuilder("sk-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := b.Build(ctx, parse(t, `
metadata: {name: r}
spec:
  goal: g
  model:
    provider: openai
    name: m
    api: responses
    baseURL: '`+srv.URL+`/v1'
    apiKeySecretRef: {name: k, key: k}
    fallbacks:
    - {provider: openai, name: f, baseURL: '`+srv.URL+`/v1', apiKeySecretRef: {name: k, key: k}}
  budget: {maxTurns: 2}
`), egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 10}
	for i, want := range []string{"/v1/responses", "/v1/chat/completions"} {
		reply, err := k.ModelAt(i).Complete(ctx, req)
		if err != nil {
			t.Fatalf("model %d: %v", i, err)
		}
		if got := <-paths; got != want || reply.Content != "hello" {
			t.Errorf("model %d: called %s and answered %q; want %s and hello", i, got, reply.Content, want)
		}
	}
}

// loopbackBuilder builds kits whose model calls may reach servers on
// loopback, with key as every Secret's value.
func loopbackBuilder(key string) *Builder {
	return &Builder{Egress: egress.NewClients(&egress.Policy{Allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}}),
		Secrets: func(context.Context, string, string, string) (string, error) { return key, nil }}
}
