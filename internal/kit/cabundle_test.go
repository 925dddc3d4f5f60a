package kit

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/egress"
	"github.com/agentrun/agentrun/internal/loop"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// privateCA is a certificate authority made for one test, and a server
// certificate for 127.0.0.1 it signed.
type privateCA struct {
	pem  string // the CA's certificate
	leaf tls.Certificate
}

func newPrivateCA(t *testing.T) privateCA {
	t.Helper()
	key := func() *ecdsa.PrivateKey {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		return k
	}
	caKey, leafKey := key(), key()
	now := time.Now()
	ca := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "AgentRun test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IsCA: true, BasicConstraintsValid: true,
		KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "127.0.0.1"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	leafDER, err := x509.CreateCertificate(rand.Reader, leaf, ca, &leafKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	return privateCA{
		pem:  string(pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER})),
		leaf: tls.Certificate{Certificate: [][]byte{leafDER}, PrivateKey: leafKey},
	}
}

// serve starts a TLS server on loopback with the CA's server certificate.
// It answers chat completions, an HTTP tool at /lookup and an MCP server
// at /mcp (to requests with the MCP tool's header).
func (ca privateCA) serve(t *testing.T) *httptest.Server {
	t.Helper()
	ms := mcp.NewServer(&mcp.Implementation{Name: "billing", Version: "v1"}, nil)
	mcp.AddTool(ms, &mcp.Tool{Name: "lookup"}, func(context.Context, *mcp.CallToolRequest, struct{}) (*mcp.CallToolResult, any, error) {
		return &mcp.CallToolResult{Content: []mcp.Content{&mcp.TextContent{Text: "from mcp"}}}, nil, nil
	})
	mux := http.NewServeMux()
	mh := mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return ms }, nil)
	mux.HandleFunc("/mcp", func(w http.ResponseWriter, r *http.Request) {
		// The MCP tool's headers go through their own transport, over
		// the one with the bundle.
		if r.Header.Get("X-Team") != "billing" {
			http.Error(w, "who are you?", http.StatusUnauthorized)
			return
		}
		mh.ServeHTTP(w, r)
	})
	mux.HandleFunc("/v1/chat/completions", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"id":"c1","object":"chat.completion","created":1,"model":"m","choices":[{"index":0,"finish_reason":"stop","message":{"role":"assistant","content":"hello"}}],"usage":{"prompt_tokens":1,"completion_tokens":1,"total_tokens":2}}`)
	})
	mux.HandleFunc("/lookup", func(w http.ResponseWriter, _ *http.Request) { fmt.Fprint(w, `{"ok":true}`) })
	srv := httptest.NewUnstartedServer(mux)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{ca.leaf}, MinVersion: tls.VersionTLS12}
	srv.Config.ErrorLog = log.New(io.Discard, "", 0) // the handshakes the tests fail on purpose
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv
}

// caManifest is a run whose model, HTTP tool and MCP tool are served at
// url, each naming bundle (a caBundleRef in flow style, or "" for none).
func caManifest(url, bundle string) string {
	ref := ""
	if bundle != "" {
		ref = ", caBundleRef: " + bundle
	}
	return `
metadata: {name: r}
spec:
  goal: g
  model: {provider: openai, name: m, baseURL: '` + url + `/v1', apiKeySecretRef: {name: k, key: k}` + ref + `}
  budget: {maxTurns: 2}
  tools:
  - name: web
    http: {url: '` + url + `/lookup'` + ref + `}
  - name: lookup
    mcp: {url: '` + url + `/mcp', tool: lookup, headers: [{name: X-Team, value: billing}]` + ref + `}
`
}

// objects are a namespace's ConfigMaps or Secrets for a test: name -> key
// -> value.
type objects map[string]map[string]string

func (o objects) read(kind string) func(context.Context, string, string, string) (string, error) {
	return func(_ context.Context, _, name, key string) (string, error) {
		v, ok := o[name][key]
		if !ok {
			return "", fmt.Errorf("%s %s has no key %s", kind, name, key)
		}
		return v, nil
	}
}

func caBuilder(configMaps, secrets objects) *Builder {
	secrets["k"] = map[string]string{"k": "sk-test"}
	return &Builder{Secrets: secrets.read("Secret"), ConfigMaps: configMaps.read("ConfigMap")}
}

// A model call, an HTTP tool and an MCP tool to servers on loopback signed
// by a private CA succeed with the CA in a bundle the run names (from a
// ConfigMap or a Secret), and fail without it with an error that says the
// certificate is not trusted and names the endpoint.
func TestBuild_caBundleTrustsAPrivateCA(t *testing.T) {
	ca, other := newPrivateCA(t), newPrivateCA(t)
	srv := ca.serve(t)
	host := strings.TrimPrefix(srv.URL, "https://")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 10}
	call := func(k *Kit, tool string) loop.Result {
		return k.Tools.Execute(ctx, loop.Invocation{CallID: "c-" + tool, Tool: tool, Arguments: json.RawMessage(`{}`),
			Attempt: 1, Timeout: 10 * time.Second, MaxResultBytes: 1 << 10})
	}

	for _, tc := range []struct{ name, ref string }{
		{"ConfigMap", "{configMapKeyRef: {name: company-ca, key: ca.crt}}"},
		{"Secret", "{secretKeyRef: {name: company-ca, key: ca.crt}}"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// The Secret's bundle holds another CA first: every
			// certificate of a bundle is trusted.
			b := caBuilder(objects{"company-ca": {"ca.crt": ca.pem}}, objects{"company-ca": {"ca.crt": other.pem + ca.pem}})
			k, err := b.Build(ctx, parse(t, caManifest(srv.URL, tc.ref)), egress.Grant{})
			if err != nil {
				t.Fatal(err)
			}
			if reply, err := k.Model.Complete(ctx, req); err != nil || reply.Content != "hello" {
				t.Errorf("model call: %+v, %v", reply, err)
			}
			if res := call(k, "web"); res.Failure != nil || string(res.Output) != `{"ok":true}` {
				t.Errorf("HTTP tool call: %q, %+v", res.Output, res.Failure)
			}
			if res := call(k, "lookup"); res.Failure != nil || string(res.Output) != "from mcp" {
				t.Errorf("MCP tool call: %q, %+v", res.Output, res.Failure)
			}
		})
	}

	t.Run("without the bundle", func(t *testing.T) {
		const untrusted = "x509: certificate signed by unknown authority"
		b := caBuilder(objects{}, objects{})
		// The MCP server is inspected when the run is built: its tool is
		// not available.
		_, err := b.Build(ctx, parse(t, caManifest(srv.URL, "")), egress.Grant{})
		if !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), untrusted) || !strings.Contains(err.Error(), host) {
			t.Errorf("MCP tool: %v\nwant ErrUnavailable saying %s and naming %s", err, untrusted, host)
		}
		run := parse(t, caManifest(srv.URL, ""))
		run.Spec.Tools = run.Spec.Tools[:1]
		k, err := b.Build(ctx, run, egress.Grant{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := k.Model.Complete(ctx, req); err == nil || !strings.Contains(err.Error(), untrusted) || !strings.Contains(err.Error(), host) {
			t.Errorf("model call: %v\nwant it to say %s and name %s", err, untrusted, host)
		} else if te, ok := err.(loop.TransientError); !ok || te.Transient() {
			// Asking again cannot succeed: the run ends at once
			// instead of after model.retry's attempts.
			t.Errorf("a model call to an untrusted server is retried: %v", err)
		}
		if res := call(k, "web"); res.Failure == nil || !strings.Contains(res.Failure.Detail, untrusted) || !strings.Contains(res.Failure.Detail, host) {
			t.Errorf("HTTP tool call: %+v\nwant it to say %s and name %s", res.Failure, untrusted, host)
		}
	})
}

// The bundle is added to the operator's transport, not swapped for a
// bare one: the egress policy, with the run's grant, still decides where
// the requests may go.
func TestBuild_caBundleKeepsTheEgressPolicy(t *testing.T) {
	ca := newPrivateCA(t)
	srv := ca.serve(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req := &loop.Request{Messages: []loop.Message{{Role: loop.RoleUser, Content: "hi"}}, MaxOutputTokens: 10}
	ref := "{configMapKeyRef: {name: company-ca, key: ca.crt}}"
	build := func(p *egress.Policy, g egress.Grant) (*Kit, error) {
		b := caBuilder(objects{"company-ca": {"ca.crt": ca.pem}}, objects{})
		b.Egress = egress.NewClients(p)
		return b.Build(ctx, parse(t, caManifest(srv.URL, ref)), g)
	}
	_, err := build(&egress.Policy{}, egress.Grant{AllowPrivate: true})
	if want := "refused: loopback address"; !errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("MCP tool under a policy that refuses loopback: %v\nwant ErrUnavailable saying %s", err, want)
	}
	loopback := []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}
	for name, allowed := range map[string]func() (*Kit, error){
		"the operator's policy": func() (*Kit, error) { return build(&egress.Policy{Allow: loopback}, egress.Grant{}) },
		"the run's grant":       func() (*Kit, error) { return build(&egress.Policy{}, egress.Grant{Allow: loopback}) },
	} {
		k, err := allowed()
		if err != nil {
			t.Fatalf("loopback allowed by %s: %v", name, err)
		}
		if reply, err := k.Model.Complete(ctx, req); err != nil || reply.Content != "hello" {
			t.Errorf("model call with loopback allowed by %s: %+v, %v", name, reply, err)
		}
	}
}

// A bundle that cannot be used fails the build with an error that names
// the field, the object and the key; none of them is a tool being
// unavailable (the run's configuration is wrong).
func TestBuild_caBundleThatCannotBeUsed(t *testing.T) {
	ca := newPrivateCA(t)
	garbage := "-----BEGIN CERTIFICATE-----\nbm90IGEgY2VydGlmaWNhdGU=\n-----END CERTIFICATE-----\n"
	key := "-----BEGIN PRIVATE KEY-----\nAAAA\n-----END PRIVATE KEY-----\n"
	for _, tc := range []struct {
		name, ref string
		cms       objects
		want      []string
	}{
		{"no certificate", "{configMapKeyRef: {name: company-ca, key: ca.crt}}", objects{"company-ca": {"ca.crt": "not PEM at all"}},
			[]string{"model.caBundleRef: the CA bundle in ConfigMap company-ca key ca.crt holds no PEM certificate"}},
		{"a certificate that does not parse", "{configMapKeyRef: {name: company-ca, key: ca.crt}}", objects{"company-ca": {"ca.crt": ca.pem + garbage}},
			[]string{"model.caBundleRef: the CA bundle in ConfigMap company-ca key ca.crt holds a certificate (the 2. in the bundle) that does not parse"}},
		{"a private key", "{configMapKeyRef: {name: company-ca, key: ca.crt}}", objects{"company-ca": {"ca.crt": ca.pem + key}},
			[]string{`holds a PEM block of type "PRIVATE KEY"`}},
		{"a missing key", "{configMapKeyRef: {name: company-ca, key: ca.pem}}", objects{"company-ca": {"ca.crt": ca.pem}},
			[]string{"model.caBundleRef: reading the CA bundle from ConfigMap company-ca key ca.pem: ConfigMap company-ca has no key ca.pem"}},
		{"a missing Secret", "{secretKeyRef: {name: company-ca, key: ca.crt}}", objects{},
			[]string{"model.caBundleRef: reading the CA bundle from Secret company-ca key ca.crt"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			run := parse(t, caManifest("https://127.0.0.1:1", ""))
			run.Spec.Tools = nil
			run.Spec.Model.CABundleRef = parse(t, caManifest("https://127.0.0.1:1", tc.ref)).Spec.Model.CABundleRef
			_, err := caBuilder(tc.cms, objects{}).Build(context.Background(), run, egress.Grant{})
			if err == nil || errors.Is(err, ErrUnavailable) {
				t.Fatalf("err = %v; want a configuration error", err)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("err = %v\nwant it to say %s", err, w)
				}
			}
		})
	}

	// An HTTP tool's and an MCP tool's bundles are named by their tool.
	run := parse(t, caManifest("https://127.0.0.1:1", "{configMapKeyRef: {name: company-ca, key: ca.crt}}"))
	run.Spec.Model.CABundleRef = nil
	_, err := caBuilder(objects{"company-ca": {"ca.crt": ""}}, objects{}).Build(context.Background(), run, egress.Grant{})
	if want := "tools[0] (web) http.caBundleRef: the CA bundle in ConfigMap company-ca key ca.crt holds no PEM certificate"; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("HTTP tool: %v\nwant %s", err, want)
	}
	run.Spec.Tools = run.Spec.Tools[1:]
	_, err = caBuilder(objects{"company-ca": {"ca.crt": ""}}, objects{}).Build(context.Background(), run, egress.Grant{})
	if want := "tools[0] (lookup) mcp.caBundleRef: the CA bundle in ConfigMap company-ca key ca.crt"; err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("MCP tool: %v\nwant a configuration error saying %s", err, want)
	}

	// A builder that reads no ConfigMaps says so, and names the other way.
	run = parse(t, caManifest("https://127.0.0.1:1", "{configMapKeyRef: {name: company-ca, key: ca.crt}}"))
	run.Spec.Tools = nil
	b := caBuilder(objects{}, objects{})
	b.ConfigMaps = nil
	_, err = b.Build(context.Background(), run, egress.Grant{})
	if want := "model.caBundleRef: ConfigMap company-ca key ca.crt: ConfigMaps cannot be read here; name the bundle with secretKeyRef"; err == nil || errors.Is(err, ErrUnavailable) || !strings.Contains(err.Error(), want) {
		t.Errorf("no ConfigMap reader: %v\nwant a configuration error saying %s", err, want)
	}
}

// Runs that name the same bundle share one client (and its connections,
// and the model package's SDK client kept for it).
func TestBuild_caBundleClientsAreShared(t *testing.T) {
	ca := newPrivateCA(t)
	b := caBuilder(objects{"company-ca": {"ca.crt": ca.pem}}, objects{})
	run := parse(t, caManifest("https://127.0.0.1:1", "{configMapKeyRef: {name: company-ca, key: ca.crt}}"))
	c1, err := b.modelClient(context.Background(), run, run.Spec.Model.CABundleRef, "model", nil)
	if err != nil {
		t.Fatal(err)
	}
	c2, err := b.modelClient(context.Background(), run, run.Spec.Model.CABundleRef, "model", nil)
	if err != nil {
		t.Fatal(err)
	}
	if c1 != c2 || c1 == nil {
		t.Errorf("two runs with the same bundle got clients %p and %p; want one", c1, c2)
	}
	other := newPrivateCA(t)
	b = caBuilder(objects{"company-ca": {"ca.crt": other.pem}}, objects{})
	if c3, err := b.modelClient(context.Background(), run, run.Spec.Model.CABundleRef, "model", nil); err != nil || c3 == c1 {
		t.Errorf("another bundle got %p, %v; want a client of its own", c3, err)
	}
	// Issue 44: what runs share is their builder's, not the process's:
	// another builder (another operator started in the process) keeps its
	// own, for the same bundle too.
	b = caBuilder(objects{"company-ca": {"ca.crt": ca.pem}}, objects{})
	if c4, err := b.modelClient(context.Background(), run, run.Spec.Model.CABundleRef, "model", nil); err != nil || c4 == c1 {
		t.Errorf("another builder got %p, %v; want a client of its own, not the first builder's %p", c4, err, c1)
	}
}
