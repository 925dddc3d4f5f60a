package kit

import (
	"context"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"

	"github.com/agentrun/agentrun/api/v1alpha1"
)

// ConfigMapReader returns one key of a ConfigMap in a namespace. CA
// bundles (caBundleRef.configMapKeyRef) are read through it when a run is
// built.
type ConfigMapReader func(ctx context.Context, namespace, name, key string) (string, error)

// RootCAsSetter is a transport that can copy itself with other TLS roots
// and every other setting kept (the egress policy's transport).
type RootCAsSetter interface {
	WithRootCAs(roots *x509.CertPool) http.RoundTripper
}

// trustKey is what makes two clients with a CA bundle interchangeable:
// the client they copy (nil: the tool packages' default transport) and
// the bundle's content.
type trustKey struct {
	base *http.Client
	sum  [sha256.Size]byte
}

// caBundle reads the bundle ref names (field says where the run names it,
// such as model.caBundleRef) and returns base (nil: a client with
// http.DefaultTransport, the tool packages' default) with a transport that
// trusts the system's roots and the bundle's certificates; the runs that
// name the same bundle over the same base share it (shared.trusted). A
// bundle that cannot be read, or holds no certificate or anything else
// than certificates, fails with an error that names the ConfigMap or
// Secret and its key.
func (b *Builder) caBundle(ctx context.Context, run *v1alpha1.AgentRun, field string, ref *v1alpha1.CABundleRef, base *http.Client) (*http.Client, error) {
	var (
		kind, name, key string
		read            func(ctx context.Context, namespace, name, key string) (string, error)
		unreadable      string // why there is no read
	)
	switch {
	case ref.ConfigMapKeyRef != nil:
		kind, name, key = "ConfigMap", ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key
		read, unreadable = b.configMapReader(run), "ConfigMaps cannot be read here; name the bundle with secretKeyRef"
	case ref.SecretKeyRef != nil:
		kind, name, key = "Secret", ref.SecretKeyRef.Name, ref.SecretKeyRef.Key
		read, unreadable = b.secretReader(run), "no Secret reader is configured"
	default:
		return nil, fmt.Errorf("%s names neither a configMapKeyRef nor a secretKeyRef", field)
	}
	where := fmt.Sprintf("%s %s key %s", kind, name, key)
	if read == nil {
		return nil, fmt.Errorf("%s: %s: %s", field, where, unreadable)
	}
	data, err := read(ctx, run.Namespace, name, key)
	if err != nil {
		return nil, fmt.Errorf("%s: reading the CA bundle from %s: %w", field, where, err)
	}
	certs, err := ParseCABundle([]byte(data))
	if err != nil {
		return nil, fmt.Errorf("%s: the CA bundle in %s %w", field, where, err)
	}
	c, err := b.shared.trusted.Get(trustKey{base: base, sum: sha256.Sum256([]byte(data))}, func() (*http.Client, error) {
		roots, err := x509.SystemCertPool()
		if err != nil {
			roots = x509.NewCertPool() // no system roots here: the bundle's only
		}
		for _, c := range certs {
			roots.AddCert(c)
		}
		var from http.Client
		if base != nil {
			from = *base
		}
		rt, err := withRootCAs(from.Transport, roots)
		if err != nil {
			return nil, err
		}
		return &http.Client{Transport: rt, CheckRedirect: from.CheckRedirect, Jar: from.Jar, Timeout: from.Timeout}, nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: %w", field, err)
	}
	return c, nil
}

// ParseCABundle returns the certificates of a PEM bundle. It fails on a
// bundle with no certificate, a certificate that does not parse, or a
// block of another type (a private key has no place in a bundle that is
// read as public data).
func ParseCABundle(data []byte) ([]*x509.Certificate, error) {
	var certs []*x509.Certificate
	for rest := data; ; {
		var blk *pem.Block
		blk, rest = pem.Decode(rest)
		if blk == nil {
			break
		}
		if blk.Type != "CERTIFICATE" {
			return nil, fmt.Errorf("holds a PEM block of type %q: a CA bundle holds only CERTIFICATE blocks", blk.Type)
		}
		c, err := x509.ParseCertificate(blk.Bytes)
		if err != nil {
			return nil, fmt.Errorf("holds a certificate (the %d. in the bundle) that does not parse: %w", len(certs)+1, err)
		}
		certs = append(certs, c)
	}
	if len(certs) == 0 {
		return nil, errors.New("holds no PEM certificate (a block that begins -----BEGIN CERTIFICATE-----)")
	}
	return certs, nil
}

// withRootCAs copies rt with roots as its TLS roots, keeping every other
// setting (timeouts, proxy, the egress policy's dialer, buffer sizes).
func withRootCAs(rt http.RoundTripper, roots *x509.CertPool) (http.RoundTripper, error) {
	if rt == nil {
		rt = http.DefaultTransport
	}
	switch t := rt.(type) {
	case *http.Transport:
		c := t.Clone()
		if c.TLSClientConfig == nil {
			c.TLSClientConfig = &tls.Config{MinVersion: tls.VersionTLS12}
		}
		c.TLSClientConfig.RootCAs = roots
		return c, nil
	case RootCAsSetter:
		return t.WithRootCAs(roots), nil
	}
	return nil, fmt.Errorf("the operator's HTTP transport (%T) cannot take a CA bundle", rt)
}

// modelClient is the client of the run's model calls: HTTPClient, else
// the run's egress client (egressed), else the builder's default
// (shared.modelClient); with the run's CA bundle when it names one.
func (b *Builder) modelClient(ctx context.Context, run *v1alpha1.AgentRun, ref *v1alpha1.CABundleRef, field string, egressed *http.Client) (*http.Client, error) {
	client := b.HTTPClient
	if client == nil {
		client = egressed
	}
	if client == nil {
		client = b.shared.modelClient()
	}
	if ref == nil {
		return client, nil
	}
	return b.caBundle(ctx, run, field+".caBundleRef", ref, client)
}

// toolRoundTripper is the transport of one HTTP or MCP tool: the run's
// egress client's (or nil, the tool package's default), with the tool's CA
// bundle when it names one.
func (b *Builder) toolRoundTripper(ctx context.Context, run *v1alpha1.AgentRun, egressed *http.Client, field string, ref *v1alpha1.CABundleRef) (http.RoundTripper, error) {
	if ref == nil {
		return toolTransport(egressed), nil
	}
	c, err := b.caBundle(ctx, run, field, ref, egressed)
	if err != nil {
		return nil, err
	}
	return c.Transport, nil
}

// configMapReader reads as the run's service account when the builder can.
func (b *Builder) configMapReader(run *v1alpha1.AgentRun) ConfigMapReader {
	if b.ConfigMapsAs != nil {
		return b.ConfigMapsAs(serviceAccount(run))
	}
	return b.ConfigMaps
}
