package localrun

import (
	"bytes"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"sync/atomic"
	"testing"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/loop"
)

// A run's model.baseURL is its author's choice, and the operator's memory
// is everyone's: a 300 MB answer from that endpoint ends the run
// ToolFailure, with a reason that names the limit, after one request (the
// engine does not retry it), and the process reads no more of it than the
// limit. agentrun local builds and drives the run as the operator does.
func TestRun_aHugeModelReplyEndsTheRunNamingTheLimit(t *testing.T) {
	const size = 300 << 20
	var requests atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		requests.Add(1)
		w.Header().Set("Content-Type", "application/json")
		head := `{"id":"c1","object":"chat.completion","created":1,"model":"gpt-5.1","choices":[{"index":0,"message":{"role":"assistant","content":"`
		if _, err := io.WriteString(w, head); err != nil {
			return
		}
		filler := bytes.Repeat([]byte("a"), 32<<10)
		for left := size - len(head); left > 0; left -= len(filler) {
			if _, err := w.Write(filler[:min(left, len(filler))]); err != nil {
				return // the client went away
			}
		}
	}))
	defer srv.Close()
	manifest := `
apiVersion: v1
kind: Secret
metadata: {name: openai}
stringData: {api-key: sk-local}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: huge-reply}
spec:
  goal: "Say hello."
  model: {provider: openai, name: gpt-5.1, baseURL: "` + srv.URL + `/v1", apiKeySecretRef: {name: openai, key: api-key}}
  budget: {maxTurns: 3, maxCostUSD: "1"}
`
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	r := run(t, manifest, Options{JSON: true})
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	t.Logf("a %d MiB reply: the run allocated %.1f MiB, its heap grew by %.1f MiB", size>>20,
		float64(allocated)/(1<<20), float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/(1<<20))

	r.mustExit(t, ExitCode(loop.ToolFailure))
	st := decodeStatus(t, r.stdout)
	want := "the model provider failed: openai: the reply is larger than 8 MiB, the operator's limit for a model reply (--model-max-reply-bytes); it was not read"
	if st.Outcome != v1alpha1.OutcomeToolFailure || st.Reason != want {
		t.Errorf("outcome %s, reason %q\nwant ToolFailure, %q", st.Outcome, st.Reason, want)
	}
	if n := requests.Load(); n != 1 {
		t.Errorf("the endpoint saw %d requests, want 1", n)
	}
	if allocated > 64<<20 {
		t.Errorf("the run allocated %d MiB for a %d MiB reply; want well under 64 MiB", allocated>>20, size>>20)
	}
}
