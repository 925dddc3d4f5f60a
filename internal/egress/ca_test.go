package egress

import (
	"encoding/pem"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// caChild, when set, makes this test binary one request through the
// operator's transport to the URL it holds, and print how it went: Go
// reads the system roots (and SSL_CERT_DIR) once per process.
const caChild = "AGENTRUN_EGRESS_CA_CHILD_URL"

func TestMain(m *testing.M) {
	if url := os.Getenv(caChild); url != "" {
		p := &Policy{Allow: Loopback}
		res, err := (&http.Client{Transport: p.Transport()}).Get(url)
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(0)
		}
		_ = res.Body.Close()
		fmt.Println("status:", res.StatusCode)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// Issue 34.2: the operator's transport (model calls, HTTP and MCP tools)
// trusts a server signed by a private CA once the CA's directory is in
// SSL_CERT_DIR (the chart's extraVolumes, extraVolumeMounts and extraEnv),
// and fails clearly without it.
func TestTransport_trustsAPrivateCAFromSSLCertDir(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) }))
	defer srv.Close()
	dir := t.TempDir()
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(filepath.Join(dir, "company-ca.crt"), ca, 0o600); err != nil {
		t.Fatal(err)
	}
	child := func(env ...string) string {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), append(env, caChild+"="+srv.URL)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("the child failed: %v\n%s", err, out)
		}
		return strings.TrimSpace(string(out))
	}
	if got := child("SSL_CERT_DIR=" + dir); got != "status: 418" {
		t.Errorf("with the CA in SSL_CERT_DIR: %s; want status: 418", got)
	}
	if got := child("SSL_CERT_DIR=" + t.TempDir()); !strings.Contains(got, "certificate signed by unknown authority") {
		t.Errorf("without the CA: %s; want an unknown-authority error", got)
	}
}
