package localrun

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/limits"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/agentrun/agentrun/internal/telemetry"
	"github.com/agentrun/agentrun/internal/testenv"
	"github.com/google/go-cmp/cmp"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
)

type result struct {
	code           int
	stdout, stderr string
}

func writeManifest(t *testing.T, content string) string {
	t.Helper()
	return writeManifestIn(t, t.TempDir(), content)
}

// writeManifestIn writes content as dir/run.yaml; its local tools run in
// dir, so a test can look there for what they did.
func writeManifestIn(t *testing.T, dir, content string) string {
	t.Helper()
	path := filepath.Join(dir, "run.yaml")
	if err := os.WriteFile(path, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func run(t *testing.T, manifest string, o Options) result {
	t.Helper()
	return runPath(t, writeManifest(t, manifest), o)
}

// runPath runs the manifest at path, for at most a minute, with o and its
// output captured.
func runPath(t *testing.T, path string, o Options) result {
	t.Helper()
	var stdout, stderr bytes.Buffer
	o.Stdout, o.Stderr = &stdout, &stderr
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	code := Run(ctx, path, o)
	return result{code, stdout.String(), stderr.String()}
}

// mustExit fails the test unless the run exited with code, and shows what
// it printed.
func (r result) mustExit(t *testing.T, code int) {
	t.Helper()
	if r.code != code {
		t.Fatalf("exit status = %d, want %d\nstdout:\n%s\nstderr:\n%s", r.code, code, r.stdout, r.stderr)
	}
}

// testdataPath is the manifest testdata/name (go test runs in the package
// directory).
func testdataPath(name string) string {
	return filepath.Join("testdata", name)
}

// readTestdata returns the manifest testdata/name, for a test that edits
// it or writes it beside its tools' files.
func readTestdata(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(testdataPath(name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// samplePath is config/samples/name in the repository.
func samplePath(t *testing.T, name string) string {
	t.Helper()
	root, err := testenv.RepoRoot()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(root, "config", "samples", name)
}

func mustContain(t *testing.T, what, got string, want ...string) {
	t.Helper()
	for _, w := range want {
		if !strings.Contains(got, w) {
			t.Errorf("%s does not contain %q:\n%s", what, w, got)
		}
	}
}

func decodeStatus(t *testing.T, out string) v1alpha1.AgentRunStatus {
	t.Helper()
	var st v1alpha1.AgentRunStatus
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&st); err != nil {
		t.Fatalf("stdout is not one AgentRun status: %v\n%s", err, out)
	}
	return st
}

func TestRun_jobToolEchoesItsArgumentsAndRunCompletes(t *testing.T) {
	r := runPath(t, testdataPath("echo-run.yaml"), Options{})
	if r.code != 0 {
		t.Fatalf("exit status = %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout,
		"Turn 1 started",
		"Model answered turn 1 with 1 tool call(s) (1000 input, 20 output tokens",
		`t1-c1 echo {"text":"hello"} -> allow (policy.default)`,
		`t1-c1 echo: ok`, `-> {"text":"hello"}`,
		"Turn 2 started",
		"outcome: Completed\n",
		"reason: the model gave a final answer on turn 2\n",
		"answer: The tool said hello.\n")
	if r.stderr != "" {
		t.Errorf("stderr = %q, want nothing", r.stderr)
	}
}

func TestRun_jsonPrintsOnlyTheStatus(t *testing.T) {
	r := runPath(t, testdataPath("echo-run.yaml"), Options{JSON: true})
	if r.code != 0 {
		t.Fatalf("exit status = %d, want 0; stderr:\n%s", r.code, r.stderr)
	}
	st := decodeStatus(t, r.stdout)
	two := int32(2)
	want := v1alpha1.AgentRunStatus{
		Phase:   v1alpha1.PhaseSucceeded,
		Outcome: v1alpha1.OutcomeCompleted,
		Reason:  "the model gave a final answer on turn 2",
		Answer:  "The tool said hello.",
		Turn:    2,
		Usage: &v1alpha1.UsageStatus{Turns: 2, InputTokens: 2200, OutputTokens: 30, CostUSD: "0.00705",
			ToolCalls: 1, PerTool: map[string]int32{"echo": 1}, WallClockSeconds: st.Usage.WallClockSeconds},
	}
	got := v1alpha1.AgentRunStatus{Phase: st.Phase, Outcome: st.Outcome, Reason: st.Reason, Answer: st.Answer, Turn: st.Turn, Usage: st.Usage}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("status (-want +got):\n%s", d)
	}
	if c := st.Convergence; c == nil || c.TurnsToCompletion == nil || *c.TurnsToCompletion != two || c.Headroom["turns"] != "0.50" {
		t.Errorf("convergence = %+v, want turnsToCompletion 2 and turns headroom 0.50", c)
	}
	if len(st.Conditions) == 0 || st.Conditions[0].Type != v1alpha1.ConditionSucceeded || st.Conditions[0].Status != "True" ||
		st.Conditions[0].Reason != "Completed" {
		t.Errorf("conditions = %+v, want Succeeded True Completed first", st.Conditions)
	}
	if st.StartTime == nil || st.CompletionTime == nil {
		t.Errorf("startTime %v, completionTime %v: want both set", st.StartTime, st.CompletionTime)
	}
}

func TestRun_askWithNoTerminalIsDeclinedAndTheModelRoutesAround(t *testing.T) {
	r := runPath(t, testdataPath("ask-run.yaml"), Options{JSON: false})
	if r.code != 0 {
		t.Fatalf("exit status = %d, want 0\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, "no terminal to ask on: declining t1-c1 (refund), which asks a person (policy.rules[0]: Refunds above 50.00 need a person.)")
	mustContain(t, "stdout", r.stdout,
		`t1-c1 refund {"amount_minor":8240} -> needs a person (policy.rules[0]): Refunds above 50.00 need a person.`,
		"t1-c1 refund: declined, no terminal to ask on",
		"t2-c1 echo: ok",
		"outcome: Completed")
	if strings.Contains(r.stdout, "refunded") {
		t.Errorf("the declined refund ran:\n%s", r.stdout)
	}
	// "ask" is printed only where someone is asked (issue 28).
	if strings.Contains(r.stdout, "-> ask") {
		t.Errorf("the stream says ask, but nobody was asked:\n%s", r.stdout)
	}
}

func TestRun_askOnTheTerminal(t *testing.T) {
	for _, tc := range []struct {
		input   string
		code    int
		outcome v1alpha1.Outcome
		ran     bool
	}{
		{input: "approve\n", code: 0, outcome: v1alpha1.OutcomeCompleted, ran: true},
		{input: "what?\ny\n", code: 0, outcome: v1alpha1.OutcomeCompleted, ran: true},
		{input: "deny\n", code: 0, outcome: v1alpha1.OutcomeCompleted},
		{input: "", code: 0, outcome: v1alpha1.OutcomeCompleted}, // end of input declines
		{input: "stop\n", code: 5, outcome: v1alpha1.OutcomeApprovalDenied},
	} {
		t.Run(strings.TrimSpace(tc.input), func(t *testing.T) {
			r := runPath(t, testdataPath("ask-run.yaml"), Options{JSON: true, Interactive: true, Stdin: strings.NewReader(tc.input)})
			if r.code != tc.code {
				t.Fatalf("exit status = %d, want %d\nstderr:\n%s", r.code, tc.code, r.stderr)
			}
			st := decodeStatus(t, r.stdout)
			if st.Outcome != tc.outcome {
				t.Errorf("outcome = %s (%s), want %s", st.Outcome, st.Reason, tc.outcome)
			}
			if got := st.Usage.PerTool["refund"] == 1; got != tc.ran {
				t.Errorf("refund ran = %v, want %v", got, tc.ran)
			}
			// With -o json the prompt goes to stderr, keeping stdout JSON.
			mustContain(t, "stderr", r.stderr, "t1-c1 refund asks a person", `arguments (`+loop.ArgumentsDigest([]byte(`{"amount_minor":8240}`))+`): {"amount_minor":8240}`,
				"rule: policy.rules[0]", "reason: Refunds above 50.00 need a person.", "approve / deny / stop? ")
		})
	}
}

func TestRun_interruptWhileAskingEndsApprovalDenied(t *testing.T) {
	pr, pw := io.Pipe() // a terminal nobody types on
	defer pw.Close()
	stop := make(chan struct{})
	go func() { time.Sleep(100 * time.Millisecond); close(stop) }()
	r := runPath(t, testdataPath("ask-run.yaml"), Options{JSON: true, Interactive: true, Stdin: pr, Stop: stop})
	if r.code != 5 {
		t.Fatalf("exit status = %d, want 5 (ApprovalDenied)\nstderr:\n%s", r.code, r.stderr)
	}
	st := decodeStatus(t, r.stdout)
	if st.Outcome != v1alpha1.OutcomeApprovalDenied || st.Reason != interruptedReason {
		t.Errorf("outcome %s, reason %q; want ApprovalDenied, %q", st.Outcome, st.Reason, interruptedReason)
	}
}

func TestRun_secretDocumentResolvesHTTPHeaders(t *testing.T) {
	var authorized atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Authorization") != "Bearer s3cret" || r.Header.Get("X-Team") != "billing" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		authorized.Store(true)
		fmt.Fprintf(w, `{"account_id":"acct_1","email":%q}`, r.URL.Query().Get("email"))
	}))
	defer srv.Close()
	manifest := fmt.Sprintf(`
apiVersion: v1
kind: Secret
metadata: {name: billing-api, namespace: somewhere-else}
data: {token: QmVhcmVyIHMzY3JldA==}   # "Bearer s3cret"
---
apiVersion: v1
kind: Secret
metadata: {name: team}
stringData: {name: billing}
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: http-run}
spec:
  goal: "Find the account."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: lookup, arguments: {email: a@example.com}}]
    - content: "acct_1"
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http:
      url: "%s/accounts?email={{.email}}"
      headers:
      - {name: Authorization, valueFrom: {secretKeyRef: {name: billing-api, key: token}}}
      - {name: X-Team, valueFrom: {secretKeyRef: {name: team, key: name}}}
`, srv.URL)
	r := run(t, manifest, Options{})
	if r.code != 0 || !authorized.Load() {
		t.Fatalf("exit status %d, server saw the headers: %v\nstdout:\n%s\nstderr:\n%s", r.code, authorized.Load(), r.stdout, r.stderr)
	}
	mustContain(t, "stdout", r.stdout, `t1-c1 lookup: ok`, `{"account_id":"acct_1","email":"a@example.com"}`)
	if strings.Contains(r.stdout+r.stderr, "s3cret") {
		t.Errorf("the Secret's value was printed")
	}
}

// A ConfigMap document holds the CA bundle an HTTP tool names: the tool
// reaches a server signed by that CA. A bundle the file does not hold is
// refused before anything runs, naming the field and the ConfigMap.
func TestRun_configMapDocumentHoldsTheToolsCABundle(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"ok":true}`) }))
	srv.Config.ErrorLog = log.New(io.Discard, "", 0)
	defer srv.Close()
	// httptest's certificate is its own CA.
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	manifest := func(bundle string) string {
		return fmt.Sprintf(`
apiVersion: v1
kind: ConfigMap
metadata: {name: company-ca}
data:
  ca.crt: %q
---
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: ca-run}
spec:
  goal: "Look it up."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: lookup, arguments: {}}]
    - content: "done"
  budget: {maxTurns: 3}
  tools:
  - name: lookup
    http:
      url: "%s/lookup"
      caBundleRef: {configMapKeyRef: {name: %s, key: ca.crt}}
`, ca, srv.URL, bundle)
	}
	r := run(t, manifest("company-ca"), Options{})
	r.mustExit(t, 0)
	mustContain(t, "stdout", r.stdout, `t1-c1 lookup: ok`, `{"ok":true}`)

	r = run(t, manifest("other-ca"), Options{})
	r.mustExit(t, ExitUsage)
	mustContain(t, "stderr", r.stderr, `tools[0] (lookup) http.caBundleRef: no ConfigMap "other-ca" in the manifest file (add a v1 ConfigMap document to the file)`)
}

func TestRun_builtinKubernetesToolIsToolFailure(t *testing.T) {
	path := testdataPath("cluster-reader.yaml")
	r := runPath(t, path, Options{})
	if r.code != 7 {
		t.Fatalf("exit status = %d, want 7 (ToolFailure)\nstderr:\n%s", r.code, r.stderr)
	}
	mustContain(t, "stderr", r.stderr, `AgentRun "cluster-reader" cannot run here`, "builtin kubernetes tools need a cluster")

	r = runPath(t, path, Options{JSON: true})
	st := decodeStatus(t, r.stdout)
	if st.Phase != v1alpha1.PhaseFailed || st.Outcome != v1alpha1.OutcomeToolFailure || !strings.Contains(st.Reason, "need a cluster") {
		t.Errorf("status = %s %s %q, want Failed ToolFailure naming the cluster", st.Phase, st.Outcome, st.Reason)
	}
}

func TestRun_malformedManifestExitsOneNamingTheDocument(t *testing.T) {
	r := run(t, readTestdata(t, "echo-run.yaml")+"---\napiVersion: v1\nkind: Service\nmetadata: {name: web}\n", Options{})
	if r.code != ExitUsage {
		t.Fatalf("exit status = %d, want %d", r.code, ExitUsage)
	}
	mustContain(t, "stderr", r.stderr, `document 2 (Service "web")`)
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}

	r = run(t, "", Options{})
	if r.code != ExitUsage {
		t.Errorf("an empty file: exit status %d, want %d", r.code, ExitUsage)
	}
	var stderr bytes.Buffer
	if code := Run(context.Background(), filepath.Join(t.TempDir(), "missing.yaml"), Options{Stdout: io.Discard, Stderr: &stderr}); code != ExitUsage {
		t.Errorf("a missing file: exit status %d, want %d", code, ExitUsage)
	}
	mustContain(t, "stderr", stderr.String(), "missing.yaml")
}

func TestRun_stopBeforeTheFirstTurnEndsApprovalDenied(t *testing.T) {
	stop := make(chan struct{})
	close(stop)
	r := runPath(t, testdataPath("echo-run.yaml"), Options{Stop: stop})
	if r.code != 5 {
		t.Fatalf("exit status = %d, want 5\n%s", r.code, r.stdout)
	}
	mustContain(t, "stdout", r.stdout, "outcome: ApprovalDenied\n", "reason: "+interruptedReason)
}

func TestRun_outcomesBecomeExitStatuses(t *testing.T) {
	for _, tc := range []struct {
		name, script string
		code         int
	}{
		{"budget", `[{toolCalls: [{name: echo, arguments: {text: a}}]}, {toolCalls: [{name: echo, arguments: {text: b}}]}]`, 2},
		{"refusal", `[{refusal: "I will not."}]`, 3},
		{"loop", `[{toolCalls: [{name: echo, arguments: {text: a}}]}, {toolCalls: [{name: echo, arguments: {text: a}}]}]`, 4},
		{"escalation", `[{toolCalls: [{name: escalate_to_human, arguments: {reason: "over my head"}}]}]`, 6},
		{"model error", `[{error: "provider down"}]`, 7},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifest := `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: outcome}
spec:
  goal: "Do something."
  model: {provider: scripted, script: ` + tc.script + `}
  budget: {maxTurns: 2}
  loopDetection: {threshold: 2}
  tools:
  - name: echo
    job: {image: busybox, command: [sh, -c, "cat; echo"]}
`
			if tc.name == "budget" {
				manifest = strings.Replace(manifest, "{threshold: 2}", "{threshold: 3}", 1)
				manifest = strings.Replace(manifest, "maxTurns: 2", "maxTurns: 2, perTool: {echo: 1}", 1)
			}
			r := run(t, manifest, Options{})
			if r.code != tc.code {
				t.Errorf("exit status = %d, want %d\n%s", r.code, tc.code, r.stdout)
			}
		})
	}
}

func TestRun_cancelledContextStopsTheCallInFlight(t *testing.T) {
	manifest := strings.Replace(readTestdata(t, "echo-run.yaml"), `command: [sh, -c, "cat; echo"]`, `command: [sh, -c, "sleep 20"]`, 1)
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(200*time.Millisecond, cancel)
	var stdout, stderr bytes.Buffer
	start := time.Now()
	code := Run(ctx, writeManifest(t, manifest), Options{JSON: true, Stdout: &stdout, Stderr: &stderr})
	if code != 5 {
		t.Fatalf("exit status = %d, want 5\nstderr:\n%s", code, stderr.String())
	}
	if took := time.Since(start); took > 10*time.Second {
		t.Errorf("the run took %s: the call in flight was not stopped", took)
	}
	if st := decodeStatus(t, stdout.String()); st.Reason != abortedReason {
		t.Errorf("reason = %q, want %q", st.Reason, abortedReason)
	}
}

// The reproduction: a dependency that keeps refusing connections
// and a tool that cannot start used to end Completed (the model gave up
// politely). Each is retried under its tool's retry policy, then the run
// ends ToolFailure naming the tool, the attempts and the last error.
func TestRun_unavailableDependencyEndsToolFailureAfterItsRetries(t *testing.T) {
	srv := httptest.NewServer(http.NotFoundHandler())
	srv.Close() // nothing listens any more
	for _, tc := range []struct{ name, tool, want string }{
		{"connection refused", `http: {url: "` + srv.URL + `/invoices"}`, "connection refused"},
		{"cannot start", `job: {image: x, command: [/nonexistent/find-invoices]}`, "/nonexistent/find-invoices"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			manifest := `
apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: unavailable}
spec:
  goal: "List the invoices."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: find_invoices, arguments: {}}]
    - content: "The billing service is not answering; try later."
  budget: {maxTurns: 3}
  tools:
  - name: find_invoices
    retry: {maxAttempts: 3, initialBackoff: 10ms, maxBackoff: 20ms}
    ` + tc.tool + `
`
			r := run(t, manifest, Options{JSON: true})
			if r.code != 7 {
				t.Fatalf("exit status = %d, want 7 (ToolFailure)\nstdout:\n%s\nstderr:\n%s", r.code, r.stdout, r.stderr)
			}
			st := decodeStatus(t, r.stdout)
			for _, want := range []string{"tool find_invoices", "after 3 attempts", tc.want} {
				if !strings.Contains(st.Reason, want) {
					t.Errorf("reason %q does not name %q", st.Reason, want)
				}
			}
			if st.Usage == nil || st.Usage.ToolCalls != 3 {
				t.Errorf("usage = %+v, want 3 tool calls (every attempt counts)", st.Usage)
			}
		})
	}
}

func TestRun_transientModelOutageIsRetriedThenToolFailure(t *testing.T) {
	r := runPath(t, testdataPath("outage.yaml"), Options{})
	if r.code != 7 {
		t.Fatalf("exit status = %d, want 7\n%s", r.code, r.stdout)
	}
	mustContain(t, "stdout", r.stdout, "attempt 1 of 3", "attempt 2 of 3",
		"reason: the model provider stayed unavailable after 3 attempts (model.retry.maxAttempts is 3); last error: scripted model: HTTP 503 upstream overloaded")
}

// agentrun local sends the operator's spans: the run, its chats and its
// tool call, in one trace under the run span.
func TestRun_sendsTheRunsSpans(t *testing.T) {
	exp := tracetest.NewInMemoryExporter()
	res := runPath(t, testdataPath("echo-run.yaml"), Options{TracerProvider: telemetry.NewProvider(sdktrace.WithSyncer(exp))})
	if res.code != 0 {
		t.Fatalf("exit %d: %s", res.code, res.stderr)
	}
	spans := exp.GetSpans()
	var names []string
	var root tracetest.SpanStub
	for _, s := range spans {
		names = append(names, s.Name)
		if s.Name == "invoke_agent echo-run" {
			root = s
		}
	}
	if d := cmp.Diff([]string{"chat", "execute_tool echo", "chat", "invoke_agent echo-run"}, names); d != "" {
		t.Fatalf("spans (-want +got):\n%s", d)
	}
	for _, s := range spans[:3] {
		if s.Parent.SpanID() != root.SpanContext.SpanID() || s.SpanContext.TraceID() != root.SpanContext.TraceID() {
			t.Errorf("%s is not a child of the run span", s.Name)
		}
	}
}

// Issue 28: the stream says what happened. A scripted call's arguments are
// shown, and reach the tool, as written (no "\u003c" for "<"), and an
// empty answer is not called a final one.
func TestRun_streamShowsArgumentsAsWrittenAndAnEmptyAnswerAsEmpty(t *testing.T) {
	manifest := strings.Replace(readTestdata(t, "echo-run.yaml"), "{text: hello}", `{text: "<b>&</b>"}`, 1)
	manifest = strings.Replace(manifest, `    - content: "The tool said hello."`, "    - content: \"\"\n    - content: \"The tool said hello.\"", 1)
	r := run(t, manifest, Options{})
	r.mustExit(t, 0)
	mustContain(t, "stdout", r.stdout,
		`t1-c1 echo {"text":"<b>&</b>"} -> allow (policy.default)`,
		`-> {"text":"<b>&</b>"}`,
		"Model answered turn 2 with an empty answer, not a final one",
		"Model answered turn 3 with a final answer")
	if strings.Contains(r.stdout, `\u003c`) {
		t.Errorf("the stream escapes what the script wrote:\n%s", r.stdout)
	}
}

// The stream's wall clock agrees with the status's (issue 28): the whole
// seconds status.usage.wallClockSeconds shows (rounded up), then the
// measured time they round up from.
func TestRun_streamWallClockAgreesWithStatus(t *testing.T) {
	r := runPath(t, testdataPath("echo-run.yaml"), Options{})
	r.mustExit(t, 0)
	m := regexp.MustCompile(`(\d+)s of wall clock \(([^)]+)\)`).FindStringSubmatch(r.stdout)
	if m == nil {
		t.Fatalf("no wall clock in the usage line:\n%s", r.stdout)
	}
	measured, err := time.ParseDuration(m[2])
	if err != nil {
		t.Fatal(err)
	}
	if want := limits.WallClockSeconds(measured); m[1] != strconv.FormatInt(want, 10) {
		t.Fatalf("the stream shows %ss for %s; status shows %ds", m[1], measured, want)
	}
}

// A batch that a guardrail halts while it is vetted still shows the
// arguments of the calls vetted before (issue 28).
func TestRun_aHaltedBatchKeepsTheArgumentsOfItsCalls(t *testing.T) {
	r := run(t, `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: halted}
spec:
  goal: Look it up.
  model:
    provider: scripted
    script:
    - toolCalls:
      - {name: echo, arguments: {q: fine}}
      - {name: echo, arguments: {q: "4111111111111111"}}
  budget: {maxTurns: 2}
  guardrails:
  - {name: pan, pattern: '\d{16}', severity: halt}
  tools:
  - name: echo
    job: {image: busybox, command: [cat]}
`, Options{})
	r.mustExit(t, 3) // GuardrailStop
	mustContain(t, "stdout", r.stdout, `t1-c1 echo {"q":"fine"} -> allow (policy.default)`, "outcome: GuardrailStop")
}

// Issue 28: the stream counts a tool's retry attempts as the tool ran
// them. A read-only tool that exits 75 (a dependency is down) on every
// attempt of three runs three times; the stream says attempts 1 and 2 of
// 3 failed and were retried, and the run ends after 3 attempts, naming
// the manifest's retry.maxAttempts.
func TestRun_streamCountsToolAttemptsAsTheyRan(t *testing.T) {
	dir := t.TempDir()
	manifest := `apiVersion: agents.agentrun.dev/v1alpha1
kind: AgentRun
metadata: {name: flaky}
spec:
  goal: "Read the ledger."
  model:
    provider: scripted
    script:
    - toolCalls: [{name: ledger, arguments: {}}]
    - content: "unreachable"
  budget: {maxTurns: 3}
  tools:
  - name: ledger
    retry: {maxAttempts: 3, initialBackoff: 10ms, maxBackoff: 20ms}
    job: {image: busybox, command: [sh, -c, "echo ran >> attempts.txt; echo 'ledger database: connection refused' >&2; exit 75"]}
`
	path := filepath.Join(dir, "flaky.yaml")
	if err := os.WriteFile(path, []byte(manifest), 0o600); err != nil {
		t.Fatal(err)
	}
	r := runPath(t, path, Options{})
	r.mustExit(t, 7)
	ran, err := os.ReadFile(filepath.Join(dir, "attempts.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(string(ran), "ran\n"); n != 3 {
		t.Errorf("the tool ran %d times, want 3 (retry.maxAttempts)", n)
	}
	mustContain(t, "stdout", r.stdout, "t1-c1 ledger: attempt 1 of 3 failed", "t1-c1 ledger: attempt 2 of 3 failed",
		"reason: tool ledger (call t1-c1) stayed unavailable after 3 attempts (retry.maxAttempts is 3)")
	for _, wrong := range []string{"attempt 0", "attempt 3 of 3 failed", "attempt 4", "after 2 attempts", "after 4 attempts"} {
		if strings.Contains(r.stdout, wrong) {
			t.Errorf("stdout says %q:\n%s", wrong, r.stdout)
		}
	}
}
