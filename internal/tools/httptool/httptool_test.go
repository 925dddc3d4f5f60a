package httptool

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/agentrun/agentrun/internal/loop"
)

// seen is what the test server received.
type seen struct {
	Method, Path, RawPath, RawQuery string
	Query                           map[string][]string
	Header                          http.Header
	Body                            string
}

// nothingSent fails the test, saying what, if the server saw a request.
func nothingSent(t *testing.T, got <-chan seen, what string) {
	t.Helper()
	select {
	case s := <-got:
		t.Errorf("%s: %+v", what, s)
	default:
	}
}

// recorder returns a server that records each request and answers with
// answer, and a channel of what it saw.
func recorder(t *testing.T, answer http.HandlerFunc) (*httptest.Server, <-chan seen) {
	t.Helper()
	got := make(chan seen, 10)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got <- seen{Method: r.Method, Path: r.URL.Path, RawPath: r.URL.EscapedPath(), RawQuery: r.URL.RawQuery,
			Query: r.URL.Query(), Header: r.Header.Clone(), Body: string(b)}
		answer(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv, got
}

func ok(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_, _ = io.WriteString(w, `{"account":"acct_42"}`)
}

func call(args string) loop.Invocation {
	return loop.Invocation{CallID: "t1-c1", Tool: "t", Arguments: json.RawMessage(args),
		IdempotencyKey: "uid/t1-c1", Timeout: 10 * time.Second, MaxResultBytes: 4096}
}

func mustNew(t *testing.T, cfg Config, resolve SecretResolver) *Executor {
	t.Helper()
	e, err := New(cfg, resolve)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return e
}

func receive(t *testing.T, c <-chan seen) seen {
	t.Helper()
	select {
	case s := <-c:
		return s
	case <-time.After(5 * time.Second):
		t.Fatal("the server received no request")
	}
	return seen{}
}

func TestExecute_escapesURLValuesForTheirPosition(t *testing.T) {
	srv, got := recorder(t, ok)
	e := mustNew(t, Config{URL: srv.URL + "/accounts/{{.id}}/invoices?email={{.email}}&month={{.month}}#{{.id}}"}, nil)
	res := e.Execute(context.Background(), call(`{"id":"a/b?c", "email":"r&x=1/\"q\"@northwind.example", "month":8}`))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	s := receive(t, got)
	if s.Path != "/accounts/a/b?c/invoices" || s.RawPath != "/accounts/a%2Fb%3Fc/invoices" {
		t.Errorf("path = %q (raw %q), want the id as one escaped segment", s.Path, s.RawPath)
	}
	want := map[string][]string{"email": {`r&x=1/"q"@northwind.example`}, "month": {"8"}}
	if diff := cmp.Diff(want, s.Query); diff != "" {
		t.Errorf("query (-want +got):\n%s", diff)
	}
	if s.Method != http.MethodGet || s.Header.Get("Idempotency-Key") != "uid/t1-c1" {
		t.Errorf("method %s, Idempotency-Key %q; want GET and the call's key", s.Method, s.Header.Get("Idempotency-Key"))
	}
	if string(res.Output) != `{"account":"acct_42"}` || res.ContentType != "application/json" {
		t.Errorf("Output, ContentType = %q, %q", res.Output, res.ContentType)
	}
}

func TestExecute_escapesJSONBodyValues(t *testing.T) {
	srv, got := recorder(t, ok)
	e := mustNew(t, Config{
		URL:  srv.URL + "/refunds",
		Body: `{"note": "refund for {{.note}}", "amount_minor": {{.amount}}, "who": {{.who}}, "tags": {{json .tags}}, "raw": "{{json .tags}}"}`,
	}, nil)
	args := `{"note":"a \"quoted\" & /slashed\\ note\n","amount":8240,"who":"x\", \"admin\": true, \"y\":\"","tags":["a","b"]}`
	res := e.Execute(context.Background(), call(args))
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	s := receive(t, got)
	if s.Method != http.MethodPost || s.Header.Get("Content-Type") != "application/json" {
		t.Errorf("method %s, Content-Type %q; want POST and application/json", s.Method, s.Header.Get("Content-Type"))
	}
	var body map[string]any
	if err := json.Unmarshal([]byte(s.Body), &body); err != nil {
		t.Fatalf("body %q is not JSON: %v", s.Body, err)
	}
	want := map[string]any{
		"note":         "refund for a \"quoted\" & /slashed\\ note\n",
		"amount_minor": 8240.0,
		"who":          `x", "admin": true, "y":"`,
		"tags":         []any{"a", "b"},
		"raw":          `["a","b"]`,
	}
	if diff := cmp.Diff(want, body); diff != "" {
		t.Errorf("body (-want +got):\n%s", diff)
	}
}

func TestExecute_formBodyIsQueryEscaped(t *testing.T) {
	srv, got := recorder(t, ok)
	e := mustNew(t, Config{
		URL: srv.URL + "/f", Method: "put",
		Headers: []Header{{Name: "Content-Type", Value: "application/x-www-form-urlencoded"}},
		Body:    "q={{.q}}&n={{.n}}",
	}, nil)
	if res := e.Execute(context.Background(), call(`{"q":"a&b=c d","n":null}`)); res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	if s := receive(t, got); s.Method != http.MethodPut || s.Body != "q=a%26b%3Dc+d&n=" {
		t.Errorf("method %s, body %q; want PUT and q=a%%26b%%3Dc+d&n=", s.Method, s.Body)
	}
}

func TestExecute_missingArgumentIsInvalidCall(t *testing.T) {
	srv, got := recorder(t, ok)
	for name, cfg := range map[string]Config{
		"url":  {URL: srv.URL + "/a?email={{.email}}"},
		"body": {URL: srv.URL + "/a", Body: `{"email": {{.email}}}`},
	} {
		t.Run(name, func(t *testing.T) {
			res := mustNew(t, cfg, nil).Execute(context.Background(), call(`{"name":"x"}`))
			want := &loop.Failure{Kind: loop.FailInvalid, Detail: `argument "email" is missing`}
			if diff := cmp.Diff(want, res.Failure); diff != "" {
				t.Errorf("Failure (-want +got):\n%s", diff)
			}
		})
	}
	for name, args := range map[string]string{"array": `[1]`, "garbage": `{"a":`, "two objects": `{} {}`} {
		t.Run(name, func(t *testing.T) {
			res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), call(args))
			if res.Failure == nil || res.Failure.Kind != loop.FailInvalid {
				t.Errorf("Failure = %+v, want InvalidCall", res.Failure)
			}
		})
	}
	nothingSent(t, got, "an invalid call reached the server")
}

func TestExecute_secretHeaderIsResolvedPerCall(t *testing.T) {
	srv, got := recorder(t, ok)
	var asked []string
	resolve := func(_ context.Context, name, key string) (string, error) {
		asked = append(asked, name+"/"+key)
		return "Bearer s3cret\n", nil
	}
	e := mustNew(t, Config{URL: srv.URL + "/x", Headers: []Header{
		{Name: "Authorization", Secret: &SecretKeyRef{Name: "billing", Key: "token"}},
		{Name: "X-Tenant", Value: "northwind"},
	}}, resolve)
	if res := e.Execute(context.Background(), call(`{}`)); res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	s := receive(t, got)
	if s.Header.Get("Authorization") != "Bearer s3cret" || s.Header.Get("X-Tenant") != "northwind" {
		t.Errorf("headers = %v", s.Header)
	}
	if diff := cmp.Diff([]string{"billing/token"}, asked); diff != "" {
		t.Errorf("resolver calls (-want +got):\n%s", diff)
	}
}

func TestExecute_unreadableSecretFailsWithoutSending(t *testing.T) {
	srv, got := recorder(t, ok)
	resolve := func(context.Context, string, string) (string, error) {
		return "", errors.New(`secrets "billing" not found`)
	}
	e := mustNew(t, Config{URL: srv.URL, Headers: []Header{
		{Name: "Authorization", Secret: &SecretKeyRef{Name: "billing", Key: "token"}},
	}}, resolve)
	if err := e.Preflight(context.Background()); err == nil || !strings.Contains(err.Error(), `secret "billing"`) {
		t.Errorf("Preflight = %v, want an error naming the secret", err)
	}
	res := e.Execute(context.Background(), call(`{}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable || !strings.Contains(res.Failure.Detail, "Authorization") {
		t.Errorf("Failure = %+v, want Unavailable naming the header", res.Failure)
	}
	nothingSent(t, got, "the request was sent")
}

func TestExecute_nonSuccessPassesStatusTypeAndBodyThrough(t *testing.T) {
	const page = "<!doctype html><html><body><form>Sign in to continue. Password:</form></body></html>"
	srv, _ := recorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.WriteHeader(http.StatusForbidden)
		_, _ = io.WriteString(w, page)
	})
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), call(`{}`))
	want := loop.Result{
		Output:      []byte(page),
		ContentType: "text/html; charset=utf-8",
		Failure:     &loop.Failure{Kind: loop.FailHTTP, Code: 403, Detail: "403 Forbidden"},
		Size:        int64(len(page)),
	}
	res.Duration = 0
	if diff := cmp.Diff(want, res); diff != "" {
		t.Errorf("Result (-want +got):\n%s", diff)
	}
}

func TestExecute_rateLimitCarriesTheServersRetryAfterAndIsTransient(t *testing.T) {
	srv, _ := recorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Retry-After", "7")
		w.WriteHeader(http.StatusTooManyRequests)
	})
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), call(`{}`))
	if res.Failure == nil || res.Failure.Code != 429 || res.Failure.RetryAfter != 7*time.Second || !res.Failure.Transient() {
		t.Fatalf("Failure = %+v, want a transient 429 asking for 7s", res.Failure)
	}
}

func TestExecute_connectionRefusedIsTransient(t *testing.T) {
	srv, _ := recorder(t, ok)
	srv.Close()
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), call(`{}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailUnavailable || !strings.Contains(res.Failure.Detail, "connection refused") ||
		!res.Failure.Transient() {
		t.Fatalf("Failure = %+v, want a transient Unavailable naming the refused connection", res.Failure)
	}
}

func TestExecute_doesNotFollowRedirectsToAnotherHost(t *testing.T) {
	other, otherGot := recorder(t, ok)
	srv, _ := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/moved" {
			http.Redirect(w, r, "/here", http.StatusFound)
			return
		}
		if r.URL.Path == "/here" {
			ok(w, r)
			return
		}
		http.Redirect(w, r, other.URL+"/login?next=x", http.StatusFound)
	})
	e := mustNew(t, Config{URL: srv.URL + "/{{.p}}", Headers: []Header{{Name: "X-Api-Key", Value: "k"}}}, nil)
	if res := e.Execute(context.Background(), call(`{"p":"moved"}`)); res.Failure != nil || string(res.Output) != `{"account":"acct_42"}` {
		t.Errorf("same-host redirect: Failure %+v, Output %q; want it followed", res.Failure, res.Output)
	}
	res := e.Execute(context.Background(), call(`{"p":"away"}`))
	if res.Failure == nil || res.Failure.Kind != loop.FailHTTP || res.Failure.Code != http.StatusFound ||
		!strings.Contains(res.Failure.Detail, other.URL+"/login") || strings.Contains(res.Failure.Detail, "next=") {
		t.Errorf("Failure = %+v, want HTTPStatus 302 naming the target without its query", res.Failure)
	}
	select {
	case s := <-otherGot:
		t.Errorf("the other host was called: %+v", s)
	default:
	}
}

func TestExecute_capsALargeBody(t *testing.T) {
	const size = 10 << 20
	srv, _ := recorder(t, func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		chunk := strings.Repeat("y", 64<<10)
		for range size / len(chunk) {
			if _, err := io.WriteString(w, chunk); err != nil {
				return // the client stopped reading, as it should
			}
		}
	})
	inv := call(`{}`)
	inv.MaxResultBytes = 1000
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), inv)
	if res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	if len(res.Output) != 1001 || !res.Truncated {
		t.Errorf("len(Output), Truncated = %d, %v; want 1001, true", len(res.Output), res.Truncated)
	}
	if res.Size != 0 && res.Size != size {
		t.Errorf("Size = %d, want 0 (unknown) or %d", res.Size, size)
	}
}

func TestExecute_refusedConnectionIsUnavailable(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	_ = l.Close()
	res := mustNew(t, Config{URL: "http://" + addr + "/x?token={{.t}}"}, nil).Execute(context.Background(), call(`{"t":"abc"}`))
	want := &loop.Failure{Kind: loop.FailUnavailable, Detail: "GET http://" + addr + "/x: connection refused"}
	if diff := cmp.Diff(want, res.Failure); diff != "" {
		t.Errorf("Failure (-want +got):\n%s", diff)
	}
}

func TestExecute_slowServerIsTimeout(t *testing.T) {
	release := make(chan struct{})
	srv, _ := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	})
	defer close(release)
	inv := call(`{}`)
	inv.Timeout = 200 * time.Millisecond
	start := time.Now()
	res := mustNew(t, Config{URL: srv.URL}, nil).Execute(context.Background(), inv)
	if res.Failure == nil || res.Failure.Kind != loop.FailTimeout {
		t.Errorf("Failure = %+v, want Timeout", res.Failure)
	}
	if took := time.Since(start); took > 3*time.Second {
		t.Errorf("Execute took %s with a 200ms timeout", took)
	}
}

func TestNew_rejectsUnsafeOrBrokenTemplates(t *testing.T) {
	for name, cfg := range map[string]Config{
		"host from arguments":   {URL: "http://{{.host}}/x"},
		"scheme from arguments": {URL: "{{.scheme}}://billing/x"},
		"relative URL":          {URL: "/accounts/{{.id}}"},
		"urlquery":              {URL: "http://billing/a?e={{.e | urlquery}}"},
		"if across positions":   {URL: `http://billing/a{{if .q}}?q={{end}}{{.q}}`},
		"value after backslash": {URL: "http://billing/", Body: `{"a": "\{{.x}}"}`},
		"body ends in string":   {URL: "http://billing/", Body: `{"a": "{{.x}}}`},
		"template call":         {URL: `http://billing/{{template "x"}}`},
		"bad method":            {URL: "http://billing/", Method: "GET /"},
		"header line break":     {URL: "http://billing/", Headers: []Header{{Name: "X", Value: "a\r\nB: c"}}},
		"secret without resolver": {URL: "http://billing/",
			Headers: []Header{{Name: "Authorization", Secret: &SecretKeyRef{Name: "s", Key: "k"}}}},
		"parse error": {URL: "http://billing/{{.x"},
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := New(cfg, nil); err == nil {
				t.Error("New succeeded, want an error")
			}
		})
	}
}

func TestTemplates_conditionalWholeParts(t *testing.T) {
	srv, got := recorder(t, ok)
	e := mustNew(t, Config{
		URL:  srv.URL + "/search?q={{.q}}{{if .limit}}&limit={{.limit}}{{end}}{{range .tags}}&tag={{.}}{{end}}",
		Body: `{"items": [{{range $i, $v := .tags}}{{if $i}}, {{end}}"{{$v}}"{{end}}]}`,
	}, nil)
	if res := e.Execute(context.Background(), call(`{"q":"a b","limit":5,"tags":["x&y","z"]}`)); res.Failure != nil {
		t.Fatalf("Failure = %+v", res.Failure)
	}
	s := receive(t, got)
	if s.RawQuery != "q=a+b&limit=5&tag=x%26y&tag=z" || s.Body != `{"items": ["x&y", "z"]}` {
		t.Errorf("query %q, body %q", s.RawQuery, s.Body)
	}
}

// A server that echoes the request's headers back (here in its answer, in
// an error answer, and cut by the size limit in the middle of the key)
// does not put the Secret's value into the result.
func TestExecute_redactsSecretHeaderValuesEchoedBack(t *testing.T) {
	const key = "sk-live-0123456789abcdef"
	srv, _ := recorder(t, func(w http.ResponseWriter, r *http.Request) {
		echo, _ := json.Marshal(map[string]any{"headers": r.Header})
		switch r.URL.Path {
		case "/fail":
			w.WriteHeader(http.StatusBadRequest)
		case "/long":
			_, _ = io.WriteString(w, strings.Repeat("x", 90)+key+strings.Repeat("y", 200))
			return
		}
		_, _ = w.Write(echo)
	})
	resolve := func(context.Context, string, string) (string, error) { return "Bearer " + key, nil }
	e := mustNew(t, Config{URL: srv.URL + "/{{.p}}", Headers: []Header{
		{Name: "Authorization", Secret: &SecretKeyRef{Name: "billing", Key: "token"}},
	}}, resolve)
	for _, p := range []string{"ok", "fail", "long"} {
		inv := call(`{"p":"` + p + `"}`)
		if p == "long" {
			inv.MaxResultBytes = 100 // the key starts at byte 90
		}
		res := e.Execute(context.Background(), inv)
		text := string(res.Output)
		if res.Failure != nil {
			text += res.Failure.Detail
		}
		if strings.Contains(text, "sk-live") || strings.Contains(text, "0123456789") {
			t.Errorf("%s: the key reached the result: %q", p, text)
		}
		if p != "long" && !strings.Contains(text, `"Authorization":["[redacted]"]`) {
			t.Errorf("%s: want the echoed header redacted, got %q", p, text)
		}
	}
}

// A path value is one segment: "." and ".." are escaped, and a URL whose
// decoded path would still hold such a segment is refused before sending.
func TestExecute_dotSegmentsCannotReachAnotherPath(t *testing.T) {
	srv, got := recorder(t, ok)
	e := mustNew(t, Config{URL: srv.URL + "/customers/{{.id}}/invoices"}, nil)
	for _, id := range []string{"..", ".", "../admin", "..%2Fadmin"} {
		res := e.Execute(context.Background(), call(`{"id":"`+id+`"}`))
		if id == "..%2Fadmin" {
			// The model's own percent sign is escaped: one odd segment.
			if res.Failure != nil {
				t.Errorf("%q: Failure = %+v", id, res.Failure)
			} else if s := receive(t, got); s.Path != "/customers/..%2Fadmin/invoices" {
				t.Errorf("%q: the server saw path %q", id, s.Path)
			}
			continue
		}
		if res.Failure == nil || res.Failure.Kind != loop.FailInvalid || !strings.Contains(res.Failure.Detail, `".."`) {
			t.Errorf("%q: Failure = %+v, want InvalidCall about the dot segment", id, res.Failure)
		}
	}
	nothingSent(t, got, "a request with a dot segment was sent")
	if got := mustRender(t, e, `{"id":"a..b"}`); got != "/customers/a..b/invoices" {
		t.Errorf("an ordinary value with dots: path %q", got)
	}
}

func mustRender(t *testing.T, e *Executor, args string) string {
	t.Helper()
	a, err := decodeArguments(json.RawMessage(args))
	if err != nil {
		t.Fatal(err)
	}
	req, _, f := e.request(context.Background(), a, "")
	if f != nil {
		t.Fatalf("Failure = %+v", f)
	}
	return req.URL.EscapedPath()
}
