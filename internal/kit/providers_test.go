package kit

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
)

// seen is what a model server was sent.
type seen struct {
	mu   sync.Mutex
	reqs []*http.Request
	body []map[string]json.RawMessage
}

func (s *seen) last(t *testing.T) (*http.Request, map[string]json.RawMessage) {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.reqs) == 0 {
		t.Fatal("the model server got no request")
	}
	return s.reqs[len(s.reqs)-1], s.body[len(s.body)-1]
}

// modelServer answers every request with reply.
func modelServer(t *testing.T, reply string) (*httptest.Server, *seen) {
	s := &seen{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		raw, _ := io.ReadAll(r.Body)
		var m map[string]json.RawMessage
		_ = json.Unmarshal(raw, &m)
		s.mu.Lock()
		s.reqs, s.body = append(s.reqs, r), append(s.body, m)
		s.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, reply)
	}))
	t.Cleanup(srv.Close)
	return srv, s
}

const (
	chatReply     = `{"id":"c","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"message":{"role":"assistant","content":"hello"},"finish_reason":"stop"}],"usage":{"prompt_tokens":5,"completion_tokens":2,"total_tokens":7}}`
	messagesReply = `{"id":"m","type":"message","role":"assistant","model":"m","content":[{"type":"text","text":"hello"}],"stop_reason":"end_turn","usage":{"input_tokens":5,"output_tokens":2}}`
)

func providerRun(model string) string {
	return `
metadata: {name: r}
spec:
  goal: g
  budget: {maxTurns: 2}
  model: ` + model + `
`
}

// Each provider's spec reaches its client: the endpoint, the credential
// (or none), and the reasoning settings.
func TestBuild_providersAndReasoning(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 8000}
	b := &Builder{Secrets: objects{"k": {"k": "sk-test"}}.read("Secret")}
	call := func(t *testing.T, model string) {
		t.Helper()
		k, err := b.Build(ctx, parse(t, providerRun(model)), egress.Grant{})
		if err != nil {
			t.Fatal(err)
		}
		if reply, err := k.Model.Complete(ctx, req); err != nil || reply.Content != "hello" {
			t.Fatalf("model call: %+v, %v", reply, err)
		}
	}

	t.Run("openai without a key, with reasoning effort", func(t *testing.T) {
		srv, got := modelServer(t, chatReply)
		call(t, `{provider: openai, name: gpt-oss-20b, baseURL: '`+srv.URL+`/v1', reasoning: {effort: high}}`)
		r, body := got.last(t)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("Authorization = %q, want none for a server that needs no key", r.Header.Get("Authorization"))
		}
		if string(body["reasoning_effort"]) != `"high"` {
			t.Errorf("reasoning_effort = %s", body["reasoning_effort"])
		}
	})
	t.Run("anthropic with a thinking budget", func(t *testing.T) {
		srv, got := modelServer(t, messagesReply)
		call(t, `{provider: anthropic, name: claude-sonnet-4-5, baseURL: '`+srv.URL+`', apiKeySecretRef: {name: k, key: k}, maxOutputTokens: 8000, reasoning: {budgetTokens: 2048}}`)
		r, body := got.last(t)
		if r.Header.Get("X-Api-Key") != "sk-test" || string(body["thinking"]) != `{"budget_tokens":2048,"type":"enabled"}` {
			t.Errorf("x-api-key %q, thinking %s", r.Header.Get("X-Api-Key"), body["thinking"])
		}
	})
	t.Run("bedrock with an API key at a VPC endpoint", func(t *testing.T) {
		srv, got := modelServer(t, messagesReply)
		call(t, `{provider: bedrock, name: 'anthropic.claude-sonnet-4-5-20250929-v1:0', baseURL: '`+srv.URL+`', bedrock: {region: us-east-1}, apiKeySecretRef: {name: k, key: k}}`)
		r, _ := got.last(t)
		if r.URL.Path != "/model/anthropic.claude-sonnet-4-5-20250929-v1:0/invoke" || r.Header.Get("Authorization") != "Bearer sk-test" {
			t.Errorf("path %q, Authorization %q", r.URL.Path, r.Header.Get("Authorization"))
		}
	})
	t.Run("azure with an API key", func(t *testing.T) {
		srv, got := modelServer(t, chatReply)
		call(t, `{provider: azure, name: o4-mini, azure: {endpoint: '`+srv.URL+`', apiVersion: '2024-10-21'}, apiKeySecretRef: {name: k, key: k}, reasoning: {effort: low}}`)
		r, body := got.last(t)
		if r.URL.Path != "/openai/deployments/o4-mini/chat/completions" || r.URL.Query().Get("api-version") != "2024-10-21" ||
			r.Header.Get("Api-Key") != "sk-test" || string(body["reasoning_effort"]) != `"low"` {
			t.Errorf("path %q, query %q, api-key %q, reasoning_effort %s", r.URL.Path, r.URL.RawQuery, r.Header.Get("Api-Key"), body["reasoning_effort"])
		}
	})
	t.Run("the operator's identity is lent only to the providers named", func(t *testing.T) {
		for model, want := range map[string]string{
			`{provider: vertex, name: 'claude-sonnet-4-5@20250929', vertex: {projectID: northwind-agents, region: us-east5}}`:     "provider vertex without an API key calls as the operator's Google identity, which this operator does not lend to runs: ask the platform team to add vertex to the operator's --cloud-identity",
			`{provider: bedrock, name: 'anthropic.claude-sonnet-4-5-20250929-v1:0', bedrock: {region: us-east-1}}`:                "provider bedrock without an API key calls as the operator's AWS identity, which this operator does not lend to runs: set model.apiKeySecretRef, or ask",
			`{provider: azure, name: o4-mini, azure: {endpoint: 'https://northwind.openai.azure.com', apiVersion: '2024-10-21'}}`: "provider azure without an API key calls as the operator's Entra ID identity",
		} {
			// Every other provider is lent.
			lender := &Builder{Secrets: b.Secrets}
			for _, p := range []v1alpha1.ModelProvider{v1alpha1.ProviderBedrock, v1alpha1.ProviderVertex, v1alpha1.ProviderAzure} {
				if !strings.Contains(model, "provider: "+string(p)+",") {
					lender.CloudIdentity = append(lender.CloudIdentity, p)
				}
			}
			if _, err := lender.Build(ctx, parse(t, providerRun(model)), egress.Grant{}); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s: err = %v, want %q", model, err, want)
			}
		}
	})
	t.Run("vertex without Google credentials fails before sending", func(t *testing.T) {
		t.Setenv("GOOGLE_APPLICATION_CREDENTIALS", filepath.Join(t.TempDir(), "missing.json"))
		b := &Builder{CloudIdentity: []v1alpha1.ModelProvider{v1alpha1.ProviderVertex}}
		k, err := b.Build(ctx, parse(t, providerRun(`{provider: vertex, name: 'claude-sonnet-4-5@20250929', vertex: {projectID: northwind-agents, region: us-east5}}`)), egress.Grant{})
		if err != nil {
			t.Fatal(err)
		}
		_, err = k.Model.Complete(ctx, req)
		if err == nil || !strings.Contains(err.Error(), "credentials unavailable") || !strings.Contains(err.Error(), "the operator's Google credentials") {
			t.Errorf("err = %v, want the missing Google credentials named", err)
		}
	})
}
