// Package modeltest has the pieces the provider tests share: a scripted
// HTTP server that records what it was sent, readers for the testdata
// files that hold request and response bodies, and the conformance suite
// (Run) that every provider adapter's tests run.
package modeltest

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// Step is one scripted answer.
type Step struct {
	Status int
	Header map[string]string
	Body   []byte
	// Size, when larger than Body, makes the body that many bytes: Body,
	// then filler written in chunks from one small buffer, so that a test
	// can send a reply far larger than anything it allocates. The server
	// stops writing when the client stops reading.
	Size int64
	// Hang makes the server wait until the client gives up.
	Hang bool
}

// Reply is a 200 step with a JSON body.
func Reply(body []byte) Step { return Step{Status: http.StatusOK, Body: body} }

// Recorded is one request the server received.
type Recorded struct {
	Method string
	Path   string
	// Query is the raw query string.
	Query string
	// Host and URI are the Host header and the request target as sent
	// (the path escaped as the client escaped it, and the query).
	Host, URI string
	Header    http.Header
	Body      []byte
}

// Server answers with its steps in order, repeating the last one.
type Server struct {
	*httptest.Server
	mu       sync.Mutex
	steps    []Step
	requests []Recorded
}

// NewServer starts a server for steps; it is closed when the test ends.
func NewServer(t testing.TB, steps ...Step) *Server {
	t.Helper()
	if len(steps) == 0 {
		t.Fatal("modeltest: a server needs at least one step")
	}
	s := &Server{steps: steps}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *Server) serve(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	s.mu.Lock()
	n := len(s.requests)
	s.requests = append(s.requests, Recorded{Method: r.Method, Path: r.URL.Path, Query: r.URL.RawQuery, Host: r.Host, URI: r.RequestURI, Header: r.Header.Clone(), Body: body})
	step := s.steps[min(n, len(s.steps)-1)]
	s.mu.Unlock()

	if step.Hang {
		<-r.Context().Done()
		return
	}
	w.Header().Set("Content-Type", "application/json")
	for k, v := range step.Header {
		w.Header().Set(k, v)
	}
	w.WriteHeader(step.Status)
	if _, err := w.Write(step.Body); err != nil || step.Size <= int64(len(step.Body)) {
		return
	}
	filler := bytes.Repeat([]byte("a"), 32<<10)
	for left := step.Size - int64(len(step.Body)); left > 0; left -= int64(len(filler)) {
		if _, err := w.Write(filler[:min(left, int64(len(filler)))]); err != nil {
			return // the client went away
		}
	}
}

// Requests returns what the server received so far.
func (s *Server) Requests() []Recorded {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Recorded(nil), s.requests...)
}

// File reads testdata/name.
func File(t testing.TB, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// JSONDiff compares two JSON documents by value and returns the
// difference as (-want +got), or "" when they are equal.
func JSONDiff(t testing.TB, want, got []byte) string {
	t.Helper()
	var w, g any
	if err := json.Unmarshal(want, &w); err != nil {
		t.Fatalf("want is not JSON: %v", err)
	}
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatalf("got is not JSON: %v\n%s", err, got)
	}
	return cmp.Diff(w, g)
}

// Members splits a JSON object into its members, keeping their bytes as
// sent.
func Members(t testing.TB, body []byte) map[string]json.RawMessage {
	t.Helper()
	var m map[string]json.RawMessage
	if err := json.Unmarshal(body, &m); err != nil {
		t.Fatalf("not a JSON object: %v\n%s", err, body)
	}
	return m
}

// Retries records what a RetryHook was told.
type Retries struct {
	mu    sync.Mutex
	calls []Retry
}

// Retry is one call of a RetryHook.
type Retry struct {
	Attempt int
	Status  int
	Err     string
}

// Hook is the RetryHook to configure.
func (r *Retries) Hook(attempt, status int, err error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	msg := ""
	if err != nil {
		msg = err.Error()
	}
	r.calls = append(r.calls, Retry{Attempt: attempt, Status: status, Err: msg})
}

// Calls returns the recorded calls.
func (r *Retries) Calls() []Retry {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Retry(nil), r.calls...)
}
