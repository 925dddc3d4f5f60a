package mcpserver

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/events"
	"sigs.k8s.io/cli-utils/pkg/kstatus/status"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/controller/controllertest"
	"github.com/agentrun/agentrun/internal/controller/reconcilers"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/testenv"
)

// ledger is an MCP server on loopback, built with the official SDK,
// speaking transport p; with token set, it refuses every request without
// that bearer token. Its tools can be added to while it serves.
type ledger struct {
	*httptest.Server
	mcp *mcp.Server
}

func serveLedger(t *testing.T, p v1alpha1.MCPTransport, token string) *ledger {
	t.Helper()
	s := mcp.NewServer(&mcp.Implementation{Name: "ledger", Version: "v1"}, nil)
	yes := true
	addTool(s, &mcp.Tool{Name: "lookup_invoice", Description: "Looks an invoice up.", Annotations: &mcp.ToolAnnotations{ReadOnlyHint: true}})
	addTool(s, &mcp.Tool{Name: "void_invoice", Description: "Voids an invoice.", Annotations: &mcp.ToolAnnotations{DestructiveHint: &yes}})
	var h http.Handler
	if p == v1alpha1.MCPSSE {
		h = mcp.NewSSEHandler(func(*http.Request) *mcp.Server { return s }, nil)
	} else {
		h = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return s }, nil)
	}
	if token != "" {
		h = auth.RequireBearerToken(func(_ context.Context, got string, _ *http.Request) (*auth.TokenInfo, error) {
			if got != token {
				return nil, auth.ErrInvalidToken
			}
			return &auth.TokenInfo{Expiration: time.Now().Add(time.Hour)}, nil
		}, nil)(h)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return &ledger{Server: srv, mcp: s}
}

func addTool(s *mcp.Server, tool *mcp.Tool) {
	mcp.AddTool(s, tool, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{}, nil, nil
	})
}

// tokenEndpoint issues token to the client ledger-client/s3cret.
func tokenEndpoint(t *testing.T, token string) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id, secret, ok := r.BasicAuth()
		w.Header().Set("Content-Type", "application/json")
		if !ok || id != "ledger-client" || secret != "s3cret" {
			w.WriteHeader(http.StatusUnauthorized)
			_, _ = w.Write([]byte(`{"error":"invalid_client"}`))
			return
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"access_token": token, "token_type": "Bearer", "expires_in": 3600})
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// secrets reads Secrets with the administrator's client: the operator
// reads them as the server's ServiceAccount (operator.RunSecrets), which
// its own tests cover.
func secrets(ctx context.Context, ns, name, key string) (string, error) {
	s := &corev1.Secret{}
	if err := cluster.Client.Get(ctx, client.ObjectKey{Namespace: ns, Name: name}, s); err != nil {
		return "", err
	}
	v, ok := s.Data[key]
	if !ok {
		return "", &missingKey{name: name, key: key}
	}
	return string(v), nil
}

type missingKey struct{ name, key string }

func (e *missingKey) Error() string { return "secret " + e.name + " has no key " + e.key }

// discoverer is a reconciler the test calls itself, against the API
// server directly (no cache), at a fixed time.
func discoverer(timeout time.Duration) (*Reconciler, *events.FakeRecorder) {
	rec := events.NewFakeRecorder(100)
	b := &kit.Builder{Secrets: secrets}
	return NewReconciler(Config{Base: reconcilers.Base{Client: cluster.Client, APIReader: cluster.Client, Recorder: rec,
		Clock: func() time.Time { return time.Date(2026, 12, 6, 18, 0, 0, 0, time.UTC) }}, Connect: b.MCPServer, Timeout: timeout}), rec
}

func makeServer(t *testing.T, ns, name string, spec v1alpha1.MCPServerSpec) *v1alpha1.MCPServer {
	t.Helper()
	s := &v1alpha1.MCPServer{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: spec}
	if err := cluster.Client.Create(context.Background(), s); err != nil {
		t.Fatalf("creating MCPServer %s: %v", name, err)
	}
	return s
}

func reconcile(t *testing.T, r *Reconciler, s *v1alpha1.MCPServer) (ctrl.Result, *v1alpha1.MCPServer) {
	t.Helper()
	res, err := r.Reconcile(context.Background(), ctrl.Request{NamespacedName: client.ObjectKeyFromObject(s)})
	if err != nil {
		t.Fatalf("reconciling %s: %v", s.Name, err)
	}
	return res, testenv.Get(t, cluster.Client, &v1alpha1.MCPServer{ObjectMeta: s.ObjectMeta})
}

// conditions are a server's conditions (Reachable, Authenticated,
// Ready), status and reason, for comparison.
func conditions(s *v1alpha1.MCPServer) map[string]string {
	out := map[string]string{}
	for _, c := range s.Status.Conditions {
		out[c.Type] = string(c.Status) + "/" + c.Reason
	}
	return out
}

func toolNames(s *v1alpha1.MCPServer) []string {
	var out []string
	for _, tool := range s.Status.Tools {
		out = append(out, tool.Name)
	}
	return out
}

// A server's tools are listed into status over either transport, with
// their annotations, both conditions True, and the next listing due a
// refresh period later; a tool the server adds is listed then.
func TestReconcile_listsTheToolsOverEachTransportAndRefreshes(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	for _, p := range []v1alpha1.MCPTransport{v1alpha1.MCPStreamableHTTP, v1alpha1.MCPSSE} {
		t.Run(string(p), func(t *testing.T) {
			l := serveLedger(t, p, "")
			s := makeServer(t, ns, "ledger-"+strings.ToLower(string(p)), v1alpha1.MCPServerSpec{URL: l.URL,
				MCPConnection: v1alpha1.MCPConnection{Transport: p}, RefreshPeriod: &metav1.Duration{Duration: 2 * time.Minute}})
			r, _ := discoverer(0)
			res, got := reconcile(t, r, s)
			if res.RequeueAfter != 2*time.Minute {
				t.Errorf("RequeueAfter = %s, want the refresh period, 2m", res.RequeueAfter)
			}
			yes, no := true, false
			want := []v1alpha1.MCPServerTool{
				{Name: "lookup_invoice", Description: "Looks an invoice up.", InputSchemaDigest: got.Status.Tools[0].InputSchemaDigest, ReadOnlyHint: &yes, DestructiveHint: &no},
				{Name: "void_invoice", Description: "Voids an invoice.", InputSchemaDigest: got.Status.Tools[1].InputSchemaDigest, ReadOnlyHint: &no, DestructiveHint: &yes},
			}
			if diff := cmp.Diff(want, got.Status.Tools); diff != "" {
				t.Errorf("status.tools (-want +got):\n%s", diff)
			}
			if !strings.HasPrefix(got.Status.Tools[0].InputSchemaDigest, "sha256:") {
				t.Errorf("inputSchemaDigest = %q", got.Status.Tools[0].InputSchemaDigest)
			}
			wantConds := map[string]string{v1alpha1.MCPServerReachable: "True/Listed", v1alpha1.MCPServerAuthenticated: "True/Listed", v1alpha1.MCPServerReady: "True/Listed"}
			if diff := cmp.Diff(wantConds, conditions(got)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if got.Status.ToolCount != 2 || got.Status.LastDiscoveryTime == nil || got.Status.ObservedGeneration != got.Generation {
				t.Errorf("toolCount %d, lastDiscoveryTime %v, observedGeneration %d", got.Status.ToolCount, got.Status.LastDiscoveryTime, got.Status.ObservedGeneration)
			}

			addTool(l.mcp, &mcp.Tool{Name: "export_ledger"})
			_, got = reconcile(t, r, s)
			if diff := cmp.Diff([]string{"export_ledger", "lookup_invoice", "void_invoice"}, sorted(toolNames(got))); diff != "" || got.Status.ToolCount != 3 {
				t.Errorf("after the server added a tool, tools (-want +got):\n%s", diff)
			}
		})
	}
}

func sorted(s []string) []string {
	out := append([]string(nil), s...)
	for i := range out {
		for j := i + 1; j < len(out); j++ {
			if out[j] < out[i] {
				out[i], out[j] = out[j], out[i]
			}
		}
	}
	return out
}

// With OAuth client credentials from a Secret, a server that refuses
// requests without a token is listed; a wrong secret, no credentials and
// a missing Secret each say which it was, and no condition or event
// holds the secret or the token.
func TestReconcile_authentication(t *testing.T) {
	const token = "tok-ledger-91"
	ns := testenv.Namespace(t, cluster.Client)
	l := serveLedger(t, v1alpha1.MCPStreamableHTTP, token)
	tokenURL := tokenEndpoint(t, token)
	for name, secret := range map[string]string{"right": "s3cret", "wrong": "guess-me"} {
		if err := cluster.Client.Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "client-" + name},
			StringData: map[string]string{v1alpha1.OAuthClientIDKey: "ledger-client", v1alpha1.OAuthClientSecretKey: secret}}); err != nil {
			t.Fatal(err)
		}
	}
	oauth := func(secret string) v1alpha1.MCPConnection {
		return v1alpha1.MCPConnection{OAuth: &v1alpha1.OAuthClientCredentials{ClientSecretRef: v1alpha1.OAuthSecretRef{Name: secret}, TokenURL: tokenURL}}
	}
	for _, tc := range []struct {
		name      string
		conn      v1alpha1.MCPConnection
		want      map[string]string
		wantTools int
		message   string
	}{
		{"client credentials", oauth("client-right"),
			map[string]string{"Reachable": "True/Listed", "Authenticated": "True/Listed", "Ready": "True/Listed"}, 2, ""},
		{"a wrong client secret", oauth("client-wrong"),
			map[string]string{"Reachable": "Unknown/NotContacted", "Authenticated": "False/TokenRefused", "Ready": "False/TokenRefused"}, 0,
			"the OAuth token endpoint " + tokenURL + " refused the client credentials (HTTP 401): invalid_client"},
		{"no credentials", v1alpha1.MCPConnection{},
			map[string]string{"Reachable": "True/CredentialsRefused", "Authenticated": "False/CredentialsRefused", "Ready": "False/CredentialsRefused"}, 0,
			"the server refused the request's credentials (HTTP 401 Unauthorized)"},
		{"a missing Secret", oauth("client-missing"),
			map[string]string{"Reachable": "Unknown/NotContacted", "Authenticated": "False/CredentialsUnavailable", "Ready": "False/CredentialsUnavailable"}, 0,
			"MCPServer auth-a-missing-secret mcp.oauth.clientSecretRef: the credentials could not be read"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := makeServer(t, ns, "auth-"+strings.ToLower(strings.ReplaceAll(tc.name, " ", "-")), v1alpha1.MCPServerSpec{URL: l.URL, MCPConnection: tc.conn})
			r, rec := discoverer(0)
			res, got := reconcile(t, r, s)
			if diff := cmp.Diff(tc.want, conditions(got)); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if len(got.Status.Tools) != tc.wantTools {
				t.Errorf("status.tools = %v, want %d tools", toolNames(got), tc.wantTools)
			}
			if tc.message != "" {
				c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.MCPServerAuthenticated)
				if !strings.Contains(c.Message, tc.message) {
					t.Errorf("Authenticated message %q does not say %q", c.Message, tc.message)
				}
				if ready := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.MCPServerReady); ready.Message != c.Message {
					t.Errorf("Ready message %q, want Authenticated's %q", ready.Message, c.Message)
				}
				if res.RequeueAfter != time.Minute {
					t.Errorf("RequeueAfter = %s after a failure, want 1m", res.RequeueAfter)
				}
			}
			all, _ := json.Marshal(got.Status)
			evs := testenv.Drain(rec)
			for _, secret := range []string{"s3cret", "guess-me", token} {
				if strings.Contains(string(all), secret) || strings.Contains(evs, secret) {
					t.Errorf("status or events hold %q:\n%s\n%s", secret, all, evs)
				}
			}
		})
	}
}

// A server that cannot be reached, or that accepts the connection and
// never answers, is Reachable False within the listing's timeout, the
// tools of the last listing kept; a Warning event says so once.
func TestReconcile_unreachableServer(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	l := serveLedger(t, v1alpha1.MCPStreamableHTTP, "")
	s := makeServer(t, ns, "goes-away", v1alpha1.MCPServerSpec{URL: l.URL})
	// A timeout a busy machine's first listing fits in; the hung server
	// below gets a reconciler with a short one.
	r, rec := discoverer(30 * time.Second)
	reconcile(t, r, s)
	l.Close()
	_, got := reconcile(t, r, s)
	if diff := cmp.Diff(map[string]string{"Reachable": "False/Unreachable", "Authenticated": "Unknown/NotContacted", "Ready": "False/Unreachable"}, conditions(got)); diff != "" {
		t.Errorf("conditions (-want +got):\n%s", diff)
	}
	if c := apimeta.FindStatusCondition(got.Status.Conditions, "Reachable"); !strings.Contains(c.Message, "is unreachable: connection refused") {
		t.Errorf("Reachable message %q", c.Message)
	}
	if len(got.Status.Tools) != 2 {
		t.Errorf("the last listing's tools were not kept: %v", toolNames(got))
	}
	if evs := testenv.Drain(rec); strings.Count(evs, "Warning Unreachable") != 1 {
		t.Errorf("events %q, want one Warning Unreachable", evs)
	}
	reconcile(t, r, s)
	if evs := testenv.Drain(rec); evs != "" {
		t.Errorf("a second failure of the same kind recorded %q", evs)
	}

	release := make(chan struct{})
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-r.Context().Done():
		case <-release:
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(func() { close(release) }) // first: Close waits for the handlers
	s = makeServer(t, ns, "hangs", v1alpha1.MCPServerSpec{URL: hung.URL})
	r, _ = discoverer(time.Second)
	// Without the timeout the reconcile would wait for the server for as
	// long as the test runs. The bound is loose on purpose: the reconcile
	// also reads policies and writes status, which a machine busy with
	// other builds can make slow (CI saw 6s).
	start := time.Now()
	_, got = reconcile(t, r, s)
	if took := time.Since(start); took > time.Minute {
		t.Errorf("the listing took %s with a 1s timeout", took)
	}
	if c := apimeta.FindStatusCondition(got.Status.Conditions, "Reachable"); c == nil || c.Status != metav1.ConditionFalse {
		t.Errorf("Reachable = %+v, want False", c)
	}
}

// Ready follows the listings, for GitOps tools that read it (kstatus,
// Argo CD, Flux): True when a listing succeeds, False with Reachable's
// reason and message when the server stops answering, True again when it
// answers; each time for the generation listed. The shipped health
// checks read it: Healthy/Current, then Degraded (Argo CD) and in
// progress (Flux, kstatus: the server may come back).
func TestReconcile_readyFollowsTheListings(t *testing.T) {
	ns := testenv.Namespace(t, cluster.Client)
	l := serveLedger(t, v1alpha1.MCPStreamableHTTP, "")
	var down atomic.Bool
	flaky := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			http.Error(w, "maintenance", http.StatusServiceUnavailable)
			return
		}
		l.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(flaky.Close)
	s := makeServer(t, ns, "flaky", v1alpha1.MCPServerSpec{URL: flaky.URL})
	r, _ := discoverer(30 * time.Second)
	type ready struct {
		Status             metav1.ConditionStatus
		Reason             string
		SameMessageAs      string
		ObservedGeneration int64
	}
	readyOf := func(got *v1alpha1.MCPServer, because string) ready {
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.MCPServerReady)
		if c == nil {
			t.Fatalf("no Ready condition: %v", conditions(got))
		}
		out := ready{Status: c.Status, Reason: c.Reason, ObservedGeneration: c.ObservedGeneration}
		if o := apimeta.FindStatusCondition(got.Status.Conditions, because); o != nil && o.Message == c.Message {
			out.SameMessageAs = because
		}
		return out
	}
	type health struct {
		Argo, Flux string
		KStatus    status.Status
	}
	healthy := health{"Healthy", "Current", status.CurrentStatus}
	for _, step := range []struct {
		name   string
		down   bool
		want   ready
		health health
	}{
		{"listed", false, ready{metav1.ConditionTrue, v1alpha1.ReasonMCPListed, v1alpha1.MCPServerReachable, s.Generation}, healthy},
		{"down", true, ready{metav1.ConditionFalse, v1alpha1.ReasonMCPUnreachable, v1alpha1.MCPServerReachable, s.Generation},
			health{"Degraded", "InProgress", status.InProgressStatus}},
		{"back", false, ready{metav1.ConditionTrue, v1alpha1.ReasonMCPListed, v1alpha1.MCPServerReachable, s.Generation}, healthy},
	} {
		down.Store(step.down)
		_, got := reconcile(t, r, s)
		if d := cmp.Diff(step.want, readyOf(got, v1alpha1.MCPServerReachable)); d != "" {
			t.Errorf("%s: Ready (-want +got):\n%s", step.name, d)
		}
		var h health
		h.Argo, h.Flux, h.KStatus = controllertest.ReadyHealthOf(t, cluster.Client, s, "MCPServer")
		if d := cmp.Diff(step.health, h); d != "" {
			t.Errorf("%s: health as GitOps tools read it (-want +got):\n%s", step.name, d)
		}
	}
}

// Run by a manager, the reconciler lists a new server's tools by itself.
func TestSetupWithManager_listsANewServer(t *testing.T) {
	g := NewWithT(t)
	ns := testenv.Namespace(t, cluster.Client)
	l := serveLedger(t, v1alpha1.MCPSSE, "")
	b := &kit.Builder{Secrets: secrets}
	testenv.StartManager(t, cluster.Config, ns, func(mgr ctrl.Manager) error {
		return NewReconciler(Config{Base: reconcilers.Base{Client: mgr.GetClient(), APIReader: mgr.GetAPIReader()}, Connect: b.MCPServer}).SetupWithManager(mgr)
	})
	s := makeServer(t, ns, "ledger", v1alpha1.MCPServerSpec{URL: l.URL, MCPConnection: v1alpha1.MCPConnection{Transport: v1alpha1.MCPSSE},
		IncludeTools: []string{"void_invoice"}})
	g.Eventually(func() []string {
		return toolNames(testenv.Get(t, cluster.Client, &v1alpha1.MCPServer{ObjectMeta: s.ObjectMeta}))
	}, 20*time.Second, 100*time.Millisecond).Should(Equal([]string{"void_invoice"}))
}
