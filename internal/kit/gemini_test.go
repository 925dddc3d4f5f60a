package kit

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
)

// Provider gemini with an API key calls the Gemini API's generateContent
// with the run's key; on Vertex AI it needs the operator's Google identity
// lent to gemini runs.
func TestBuild_geminiCallsTheGeminiAPIOrNeedsTheLentIdentity(t *testing.T) {
	seen := make(chan string, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		seen <- r.URL.Path + " key=" + r.Header.Get("X-Goog-Api-Key")
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"candidates":[{"content":{"role":"model","parts":[{"text":"hello"}]},"finishReason":"STOP"}],"usageMetadata":{"promptTokenCount":1,"candidatesTokenCount":1}}`)
	}))
	defer srv.Close()
	b := loopbackBuilder("gm-test")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	k, err := b.Build(ctx, parse(t, `
metadata: {name: r}
spec:
  goal: g
  model: {provider: gemini, name: gemini-2.5-flash, baseURL: '`+srv.URL+`/', apiKeySecretRef: {name: k, key: k}}
  budget: {maxTurns: 2}
`), egress.Grant{})
	if err != nil {
		t.Fatal(err)
	}
	reply, err := k.Model.Complete(ctx, &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 10})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := <-seen, "/v1beta/models/gemini-2.5-flash:generateContent key=gm-test"; got != want || reply.Content != "hello" {
		t.Errorf("called %q and answered %q; want %q and hello", got, reply.Content, want)
	}
	if got := k.Engine.Convergence(&loop.State{}).Context.MaxInputTokens; got != 1_048_576-4096 {
		t.Errorf("maxInputTokens %d, want the Gemini window less the reply", got)
	}

	_, err = b.Build(ctx, parse(t, `
metadata: {name: r}
spec:
  goal: g
  model: {provider: gemini, name: gemini-2.5-flash, vertex: {projectID: p, region: us-central1}}
  budget: {maxTurns: 2}
`), egress.Grant{})
	if err == nil || !strings.Contains(err.Error(), "provider gemini without an API key calls as the operator's Google identity, which this operator does not lend to runs") {
		t.Errorf("a Vertex AI run without the lent identity: %v", err)
	}
}
