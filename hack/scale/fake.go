package main

import (
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// The fake model and the HTTP tool run in a child process (this binary
// with the argument "serve"), so that the operator's heap, measured in the
// parent, holds none of their buffers.
//
// It serves the same handlers twice: over plain HTTP/1.1, as an
// OpenAI-compatible server inside the cluster would (vLLM, Ollama), and
// over TLS with HTTP/2, as the hosted providers do; the operator trusts
// the TLS listener's certificate through SSL_CERT_FILE, which the parent
// points at the file the child writes.
//
// The model speaks the OpenAI Chat Completions API. What a run gets is
// named by its model name, "scale-t<turns>-l<latency ms>" or
// "scale-t<turns>-hold": every turn but the last calls the tool lookup, the
// last answers; each reply waits the latency first, or, with hold, the
// first call of each run waits until /release is called. /sent returns,
// and forgets, when each call of a model with a latency arrived, by turn.

type fakeServer struct {
	inflight atomic.Int64
	calls    atomic.Int64
	h2Calls  atomic.Int64 // model calls that came over HTTP/2

	mu      sync.Mutex
	release chan struct{}
	// sent holds, by turn, when each call of a model with a latency
	// arrived (Unix milliseconds), until /sent reads it.
	sent map[int][]int64
}

// serve listens on loopback, writes the TLS listener's certificate (PEM)
// to certFile, prints the plain and the TLS address on one line of stdout
// and serves until stdin closes (the parent exits).
func serve(certFile string) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	f := &fakeServer{release: make(chan struct{}), sent: map[int][]int64{}}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /v1/chat/completions", f.complete)
	mux.HandleFunc("GET /tool", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"q":%q,"result":"a short answer from the tool"}`, r.URL.Query().Get("q"))
	})
	mux.HandleFunc("GET /inflight", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, "%d %d %d", f.inflight.Load(), f.calls.Load(), f.h2Calls.Load())
	})
	mux.HandleFunc("GET /sent", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		sent := f.sent
		f.sent = map[int][]int64{}
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(sent)
	})
	mux.HandleFunc("POST /release", func(w http.ResponseWriter, _ *http.Request) {
		f.mu.Lock()
		close(f.release)
		f.release = make(chan struct{})
		f.mu.Unlock()
	})
	tlsSrv := httptest.NewUnstartedServer(mux)
	tlsSrv.EnableHTTP2 = true
	tlsSrv.Config.ReadHeaderTimeout = 10 * time.Second
	tlsSrv.StartTLS()
	cert := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: tlsSrv.Certificate().Raw})
	if err := os.WriteFile(certFile, cert, 0o600); err != nil {
		return err
	}
	fmt.Println(ln.Addr().String(), tlsSrv.Listener.Addr().String())
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		os.Exit(0)
	}()
	return (&http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}).Serve(ln)
}

type chatRequest struct {
	Model    string `json:"model"`
	Messages []struct {
		Role string `json:"role"`
	} `json:"messages"`
}

func (f *fakeServer) complete(w http.ResponseWriter, r *http.Request) {
	f.inflight.Add(1)
	defer f.inflight.Add(-1)
	f.calls.Add(1)
	if r.ProtoMajor == 2 {
		f.h2Calls.Add(1)
	}
	var req chatRequest
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	turns, latency, hold := parseModel(req.Model)
	turn := 1
	for _, m := range req.Messages {
		if m.Role == "assistant" {
			turn++
		}
	}
	if latency > 0 {
		f.mu.Lock()
		f.sent[turn] = append(f.sent[turn], time.Now().UnixMilli())
		f.mu.Unlock()
	}
	switch {
	case hold && turn == 1:
		f.mu.Lock()
		ch := f.release
		f.mu.Unlock()
		select {
		case <-ch:
		case <-r.Context().Done():
			return
		}
	case latency > 0:
		select {
		case <-time.After(latency):
		case <-r.Context().Done():
			return
		}
	}
	msg := map[string]any{"role": "assistant", "content": "The answer, after looking it up."}
	finish := "stop"
	if turn < turns {
		args, _ := json.Marshal(map[string]string{"q": strconv.Itoa(turn)})
		msg = map[string]any{"role": "assistant", "content": nil, "tool_calls": []any{map[string]any{
			"id": fmt.Sprintf("call_%d", turn), "type": "function",
			"function": map[string]any{"name": "lookup", "arguments": string(args)},
		}}}
		finish = "tool_calls"
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{
		"id": fmt.Sprintf("chatcmpl-%d", f.calls.Load()), "object": "chat.completion", "created": 0, "model": req.Model,
		"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}},
		"usage":   map[string]any{"prompt_tokens": 400 + 50*turn, "completion_tokens": 20, "total_tokens": 420 + 50*turn},
	})
}

// parseModel reads "scale-t<turns>-l<ms>" or "scale-t<turns>-hold".
func parseModel(name string) (turns int, latency time.Duration, hold bool) {
	turns = 1
	for _, part := range strings.Split(name, "-") {
		switch {
		case part == "hold":
			hold = true
		case strings.HasPrefix(part, "t"):
			if n, err := strconv.Atoi(part[1:]); err == nil {
				turns = n
			}
		case strings.HasPrefix(part, "l"):
			if n, err := strconv.Atoi(part[1:]); err == nil {
				latency = time.Duration(n) * time.Millisecond
			}
		}
	}
	return turns, latency, hold
}
