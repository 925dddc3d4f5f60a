package operator

import (
	"context"
	"encoding/pem"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	. "github.com/onsi/gomega"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apimeta "k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/agentrun/agentrun/api/v1alpha1"
	"github.com/agentrun/agentrun/internal/testenv"
)

// These tests run the operator as cmd/manager wires it against a real API
// server that authorizes with RBAC. The test's client is an administrator;
// the tenant is a user who may only create, get and patch AgentRuns in her
// namespace, and acts through impersonation.
var (
	adminCfg *rest.Config
	admin    client.Client
)

func TestMain(m *testing.M) {
	ctrl.SetLogger(logr.Discard())
	os.Exit(testenv.Main(m, func(_ *envtest.Environment, cfg *rest.Config) (func() error, error) {
		adminCfg = cfg
		var err error
		if admin, err = client.New(cfg, client.Options{Scheme: testenv.Scheme}); err != nil {
			return nil, err
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() {
			// The tenants' fake providers listen on 127.0.0.1, which the
			// egress policy refuses unless allowed; the rest of loopback
			// stays refused, for a namespace's AgentRunPolicy to open
			// (TestTenant_egressOpenedByThePlatformPolicyOfItsNamespace).
			done <- Run(ctx, cfg, Options{OperatorImage: "example.com/agentrun:test", Workers: 2, MetricsAddr: "0", ProbeAddr: "0",
				EgressAllow: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32"), netip.MustParsePrefix("::1/128")}})
		}()
		return func() error {
			cancel()
			if err := <-done; err != nil {
				return fmt.Errorf("operator: %w", err)
			}
			return nil
		}, nil
	}, "--authorization-mode=RBAC"))
}

// tenantNamespace makes a namespace with a production Secret, and a user
// who may only create, get and patch AgentRuns there. It returns the
// namespace and the tenant's client.
func tenantNamespace(t *testing.T) (string, client.Client) {
	t.Helper()
	ctx := context.Background()
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{GenerateName: "tenant-"}}
	if err := admin.Create(ctx, ns); err != nil {
		t.Fatal(err)
	}
	user := "alice@" + ns.Name
	for _, o := range []client.Object{
		&corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-openai", Namespace: ns.Name},
			StringData: map[string]string{"api-key": "sk-prod-0123456789"}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "agentrun-creator", Namespace: ns.Name}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{v1alpha1.GroupVersion.Group}, Resources: []string{"agentruns"}, Verbs: []string{"create", "get", "patch"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "alice", Namespace: ns.Name},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "agentrun-creator"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: ns.Name}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	cfg := rest.CopyConfig(adminCfg)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user}
	c, err := client.New(cfg, client.Options{Scheme: testenv.Scheme})
	if err != nil {
		t.Fatal(err)
	}
	// She may not read the Secret herself.
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns.Name, Name: "prod-openai"}, &corev1.Secret{}); err == nil {
		t.Fatal("the tenant can read Secrets; the test's premise is wrong")
	}
	return ns.Name, c
}

// grantSecret lets a ServiceAccount get one Secret.
func grantSecret(t *testing.T, ns, sa, secret string) {
	t.Helper()
	ctx := context.Background()
	for _, o := range []client.Object{
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: sa, Namespace: ns}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: sa + "-keys", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"secrets"}, ResourceNames: []string{secret}, Verbs: []string{"get"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: sa + "-keys", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: sa + "-keys"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: sa, Namespace: ns}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
}

// keyCatcher is the tenant's own "model provider": it records every
// Authorization header it receives and answers like OpenAI.
type keyCatcher struct {
	*httptest.Server
	mu   sync.Mutex
	keys []string
}

func newKeyCatcher(t *testing.T) *keyCatcher { return startKeyCatcher(t, httptest.NewServer) }

// startKeyCatcher starts the catcher with start (httptest.NewTLSServer
// for one served under a certificate the operator does not trust).
func startKeyCatcher(t *testing.T, start func(http.Handler) *httptest.Server) *keyCatcher {
	k := &keyCatcher{}
	k.Server = start(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		k.mu.Lock()
		k.keys = append(k.keys, r.Header.Get("Authorization"), r.Header.Get("X-Api-Key"))
		k.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop",`+
			`"message":{"role":"assistant","content":"done"}}],"usage":{"prompt_tokens":10,"completion_tokens":2,"total_tokens":12}}`)
	}))
	t.Cleanup(k.Close)
	return k
}

func (k *keyCatcher) saw() string {
	k.mu.Lock()
	defer k.mu.Unlock()
	return strings.Join(k.keys, " ")
}

func openAIRun(ns, name, baseURL, sa string) *v1alpha1.AgentRun {
	return &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "Say done.", ServiceAccountName: sa,
			Budget: v1alpha1.BudgetSpec{MaxTurns: 2, MaxCostUSD: "1"},
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderOpenAI, Name: "m", BaseURL: baseURL, APIKeySecretRef: &v1alpha1.SecretKeySelector{Name: "prod-openai", Key: "api-key"}},
			},
		},
	}}
}

func ended(t *testing.T, c client.Client, run *v1alpha1.AgentRun) *v1alpha1.AgentRun {
	t.Helper()
	got := &v1alpha1.AgentRun{}
	NewWithT(t).Eventually(func() v1alpha1.Outcome {
		if err := c.Get(context.Background(), client.ObjectKeyFromObject(run), got); err != nil {
			return ""
		}
		return got.Status.Outcome
	}, 30*time.Second, 50*time.Millisecond).ShouldNot(BeEmpty())
	return got
}

// completesWithTheKey creates run as the tenant c and fails the test
// unless it ends Completed, having sent the provider (catcher) the
// namespace's API key.
func completesWithTheKey(t *testing.T, c client.Client, run *v1alpha1.AgentRun, catcher *keyCatcher) {
	t.Helper()
	if err := c.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	if got := ended(t, c, run); got.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Fatalf("outcome %s (%s), want Completed", got.Status.Outcome, got.Status.Reason)
	}
	if s := catcher.saw(); !strings.Contains(s, "Bearer sk-prod-0123456789") {
		t.Errorf("the provider received %q, want the key", s)
	}
}

// The reproduction: a tenant names the namespace's production Secret as
// her API key with her own baseURL, or as an HTTP tool's header. The run's
// ServiceAccount may not get that Secret, so the run is refused before
// any request, with a reason that says which account lacks what.
func TestTenant_cannotReadASecretTheRunsAccountMayNotGet(t *testing.T) {
	ns, alice := tenantNamespace(t)
	catcher := newKeyCatcher(t)

	apiKey := openAIRun(ns, "steal-api-key", catcher.URL+"/v1", "")
	header := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "steal-header"}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "Call the tool.", Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "echo"}}}, {Content: "done"}},
			},
			Tools: []v1alpha1.ToolSpec{{Name: "echo", HTTP: &v1alpha1.HTTPTool{URL: catcher.URL + "/echo",
				Headers: []v1alpha1.HTTPHeader{{Name: "X-Api-Key", ValueFrom: &v1alpha1.HeaderValueSource{
					SecretKeyRef: v1alpha1.SecretKeySelector{Name: "prod-openai", Key: "api-key"}}}}}}},
		},
	}}
	for _, run := range []*v1alpha1.AgentRun{apiKey, header} {
		if err := alice.Create(context.Background(), run); err != nil {
			t.Fatalf("the tenant may create AgentRuns: %v", err)
		}
		got := ended(t, alice, run)
		if got.Status.Outcome != v1alpha1.OutcomeError ||
			!strings.Contains(got.Status.Reason, `ServiceAccount `+ns+`/default (the run's spec.serviceAccountName) may not get Secret "prod-openai"`) {
			t.Errorf("%s: outcome %s, reason %q; want Error naming the account and the Secret", run.Name, got.Status.Outcome, got.Status.Reason)
		}
	}
	if s := catcher.saw(); strings.Contains(s, "sk-prod") || s != "" {
		t.Errorf("the tenant's server received %q; want no request at all", s)
	}
}

// A run whose ServiceAccount may get the Secret reads it as before: the
// key reaches the provider the manifest names.
func TestTenant_readsASecretTheRunsAccountMayGet(t *testing.T) {
	ns, alice := tenantNamespace(t)
	grantSecret(t, ns, "summarizer", "prod-openai")
	catcher := newKeyCatcher(t)
	completesWithTheKey(t, alice, openAIRun(ns, "allowed", catcher.URL+"/v1", "summarizer"), catcher)
}

// A run's model.caBundleRef names a ConfigMap its ServiceAccount may get,
// holding the CA of a provider served over TLS under a private CA: the
// run completes. A bundle with no certificate, or a ConfigMap the account
// may not get, ends the run Error InvalidConfiguration with a reason that
// names it, before any request is sent.
func TestTenant_modelTrustsTheCABundleTheRunNames(t *testing.T) {
	ctx := context.Background()
	ns, alice := tenantNamespace(t)
	grantSecret(t, ns, "summarizer", "prod-openai")
	catcher := startKeyCatcher(t, httptest.NewTLSServer)
	catcher.Config.ErrorLog = log.New(io.Discard, "", 0)
	// httptest's certificate is its own CA: a private CA, here.
	ca := string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: catcher.Certificate().Raw}))
	for _, o := range []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "company-ca", Namespace: ns}, Data: map[string]string{"ca.crt": ca}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "broken-ca", Namespace: ns}, Data: map[string]string{"ca.crt": "not a certificate"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "other-ca", Namespace: ns}, Data: map[string]string{"ca.crt": ca}},
		&rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: "summarizer-cas", Namespace: ns}, Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""}, Resources: []string{"configmaps"}, ResourceNames: []string{"company-ca", "broken-ca"}, Verbs: []string{"get"},
		}}},
		&rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: "summarizer-cas", Namespace: ns},
			RoleRef:  rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "summarizer-cas"},
			Subjects: []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: "summarizer", Namespace: ns}}},
	} {
		if err := admin.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	withCA := func(name, cm string) *v1alpha1.AgentRun {
		run := openAIRun(ns, name, catcher.URL+"/v1", "summarizer")
		run.Spec.Model.CABundleRef = &v1alpha1.CABundleRef{ConfigMapKeyRef: &v1alpha1.ConfigMapKeySelector{Name: cm, Key: "ca.crt"}}
		return run
	}

	broken, forbidden := withCA("broken-ca", "broken-ca"), withCA("forbidden-ca", "other-ca")
	for _, tc := range []struct {
		run  *v1alpha1.AgentRun
		want []string
	}{
		{broken, []string{"model.caBundleRef: the CA bundle in ConfigMap broken-ca key ca.crt holds no PEM certificate"}},
		{forbidden, []string{`model.caBundleRef: reading the CA bundle from ConfigMap other-ca key ca.crt: `,
			`ServiceAccount ` + ns + `/summarizer (the run's spec.serviceAccountName) may not get ConfigMap "other-ca"`}},
	} {
		if err := alice.Create(ctx, tc.run); err != nil {
			t.Fatal(err)
		}
		got := ended(t, alice, tc.run)
		c := apimeta.FindStatusCondition(got.Status.Conditions, v1alpha1.ConditionSucceeded)
		if got.Status.Outcome != v1alpha1.OutcomeError || c == nil || c.Reason != v1alpha1.ReasonInvalidConfiguration {
			t.Errorf("%s: outcome %s, condition %+v (%s); want Error, InvalidConfiguration", tc.run.Name, got.Status.Outcome, c, got.Status.Reason)
		}
		for _, w := range tc.want {
			if !strings.Contains(got.Status.Reason, w) {
				t.Errorf("%s: reason %q; want it to say %s", tc.run.Name, got.Status.Reason, w)
			}
		}
	}
	if s := catcher.saw(); s != "" {
		t.Errorf("the provider received %q before the runs with unusable bundles ended; want nothing", s)
	}

	completesWithTheKey(t, alice, withCA("private-ca", "company-ca"), catcher)
}

// Issue 42, finding 8: the operator opens 127.0.0.1 for every namespace
// (--egress-allow-cidrs), and an AgentRunPolicy opens 127.0.0.2 for the
// namespace it selects only. A model server on 127.0.0.2 answers the run
// of that namespace; the run of another tenant's namespace is refused,
// with a reason that says how the address is opened.
func TestTenant_egressOpenedByThePlatformPolicyOfItsNamespace(t *testing.T) {
	ctx := context.Background()
	l, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Fatalf("listening on 127.0.0.2 (the rest of loopback): %v", err)
	}
	catcher := startKeyCatcher(t, func(h http.Handler) *httptest.Server {
		srv := &httptest.Server{Listener: l, Config: &http.Server{Handler: h}}
		srv.Start()
		return srv
	})
	opened, alice := tenantNamespace(t)
	other, bob := tenantNamespace(t)
	nsObj := &corev1.Namespace{}
	if err := admin.Get(ctx, client.ObjectKey{Name: opened}, nsObj); err != nil {
		t.Fatal(err)
	}
	nsObj.Labels = map[string]string{"egress.test/opened": opened}
	if err := admin.Update(ctx, nsObj); err != nil {
		t.Fatal(err)
	}
	pol := &v1alpha1.AgentRunPolicy{ObjectMeta: metav1.ObjectMeta{Name: opened}, Spec: v1alpha1.AgentRunPolicySpec{
		NamespaceSelector: &metav1.LabelSelector{MatchLabels: map[string]string{"egress.test/opened": opened}},
		Egress:            &v1alpha1.PlatformEgress{AllowCIDRs: []string{"127.0.0.2"}},
	}}
	if err := admin.Create(ctx, pol); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = admin.Delete(context.Background(), pol) })

	keyless := func(ns string) *v1alpha1.AgentRun {
		run := openAIRun(ns, "gateway", catcher.URL+"/v1", "")
		run.Spec.Model.APIKeySecretRef = nil
		return run
	}
	allowed, refused := keyless(opened), keyless(other)
	if err := alice.Create(ctx, allowed); err != nil {
		t.Fatal(err)
	}
	if err := bob.Create(ctx, refused); err != nil {
		t.Fatal(err)
	}
	if got := ended(t, alice, allowed); got.Status.Outcome != v1alpha1.OutcomeCompleted {
		t.Errorf("the run of %s, which AgentRunPolicy %s opens 127.0.0.2 to: %s (%s); want Completed", opened, pol.Name, got.Status.Outcome, got.Status.Reason)
	}
	want := "egress to " + strings.TrimPrefix(catcher.URL, "http://") + " refused: loopback address (the operator's egress policy; " +
		"allow it with --egress-allow-cidrs, or per namespace with an AgentRunPolicy's spec.egress.allowCIDRs)"
	if got := ended(t, bob, refused); got.Status.Outcome != v1alpha1.OutcomeToolFailure || !strings.Contains(got.Status.Reason, want) {
		t.Errorf("the run of %s, which no policy opens 127.0.0.2 to: %s (%s); want ToolFailure saying %s", other, got.Status.Outcome, got.Status.Reason, want)
	}
}

// The reproduction's Job asked for 64 CPUs and 512Gi: a tool asking more
// than the operator's caps is refused before any Job exists, with a reason
// that names the resources.
func TestTenant_cannotRequestMoreThanTheToolCaps(t *testing.T) {
	ns, alice := tenantNamespace(t)
	run := &v1alpha1.AgentRun{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "greedy"}, Spec: v1alpha1.AgentRunSpec{
		AgentSpec: v1alpha1.AgentSpec{
			Goal: "Mine.", Budget: v1alpha1.BudgetSpec{MaxTurns: 3},
			Model: v1alpha1.ModelSpec{
				ModelEndpoint: v1alpha1.ModelEndpoint{Provider: v1alpha1.ProviderScripted},
				Script: []v1alpha1.ScriptStep{
					{ToolCalls: []v1alpha1.ScriptToolCall{{Name: "mine"}}}, {Content: "done"}},
			},
			Tools: []v1alpha1.ToolSpec{{Name: "mine", Job: &v1alpha1.JobTool{Image: "example.com/miner:1", Command: []string{"mine"},
				Resources: &corev1.ResourceRequirements{Requests: corev1.ResourceList{
					corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("512Gi")}}}}},
		},
	}}
	if err := alice.Create(context.Background(), run); err != nil {
		t.Fatal(err)
	}
	got := ended(t, alice, run)
	if got.Status.Outcome != v1alpha1.OutcomeError || !strings.Contains(got.Status.Reason, "resources.requests.cpu 64 is more than the 4") ||
		!strings.Contains(got.Status.Reason, "resources.requests.memory 512Gi is more than the 8Gi") {
		t.Errorf("outcome %s, reason %q; want Error naming the CPU and memory over the caps", got.Status.Outcome, got.Status.Reason)
	}
	var jobs batchv1.JobList
	if err := admin.List(context.Background(), &jobs, client.InNamespace(ns)); err != nil || len(jobs.Items) != 0 {
		t.Errorf("jobs = %d (%v), want none", len(jobs.Items), err)
	}
}

// Keys are read from the API server's watch cache (issue 13: a
// consistent read at every model call is an etcd quorum read each time).
// What that must not change: the read is still authorised as the run's
// account, a Secret created a moment ago is found, and a rotated key is
// read within moments.
func TestRunSecrets_cachedReadsStayAuthorisedFreshAndFollowRotation(t *testing.T) {
	ns, _ := tenantNamespace(t)
	ctx := context.Background()
	grantSecret(t, ns, "summarizer", "prod-openai")
	grantSecret(t, ns, "newcomer", "fresh-key")
	secrets := NewRunSecrets(adminCfg)
	read := secrets.As("summarizer")

	if v, err := read(ctx, ns, "prod-openai", "api-key"); err != nil || v != "sk-prod-0123456789" {
		t.Fatalf("read = %q, %v; want the key", v, err)
	}
	if _, err := secrets.As("default")(ctx, ns, "prod-openai", "api-key"); err == nil ||
		!strings.Contains(err.Error(), `may not get Secret "prod-openai"`) {
		t.Fatalf("an account without get on the Secret read it: %v", err)
	}

	fresh := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "fresh-key", Namespace: ns}, StringData: map[string]string{"k": "sk-new"}}
	if err := admin.Create(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	if v, err := secrets.As("newcomer")(ctx, ns, "fresh-key", "k"); err != nil || v != "sk-new" {
		t.Fatalf("a Secret read right after its create = %q, %v; want it found", v, err)
	}

	rotated := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "prod-openai", Namespace: ns}}
	if err := admin.Patch(ctx, rotated, client.RawPatch(types.MergePatchType, []byte(`{"stringData":{"api-key":"sk-rotated"}}`))); err != nil {
		t.Fatal(err)
	}
	g := NewWithT(t)
	g.Eventually(func() (string, error) { return read(ctx, ns, "prod-openai", "api-key") }, 2*time.Second, 10*time.Millisecond).
		Should(Equal("sk-rotated"), "a rotated key is read within moments")
}
