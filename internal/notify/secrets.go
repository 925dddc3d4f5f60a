package notify

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	standardwebhooks "github.com/standard-webhooks/standard-webhooks/libraries/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// NamespaceSecret is the Secret that overrides the webhook for the runs
// of its namespace: its key NamespaceKey holds the URL, and an empty value
// sends nothing for that namespace.
const (
	NamespaceSecret = "agentrun-notifications"
	NamespaceKey    = "webhookURL"
)

// SigningKey is the key, beside the URL in the same Secret (the
// namespace's own or the operator-wide one), that holds the secret every
// delivery is signed with (Standard Webhooks: whsec_ and base64, as
// their libraries make and read it). Without it deliveries go unsigned.
const SigningKey = "signingSecret"

// signer reads s's signing secret, if it has one.
func signer(s *corev1.Secret) (*standardwebhooks.Webhook, error) {
	v := strings.TrimSpace(string(s.Data[SigningKey]))
	if v == "" {
		return nil, nil
	}
	w, err := standardwebhooks.NewWebhook(v)
	if err != nil {
		return nil, fmt.Errorf("Secret %s/%s: key %s is not a Standard Webhooks secret (whsec_ and base64)", s.Namespace, s.Name, SigningKey)
	}
	return w, nil
}

// SecretResolver reads the webhook from Secrets, uncached (a few reads per
// waiting call; the operator caches no Secret): the namespace's own
// NamespaceSecret when there is one, else Default.
type SecretResolver struct {
	Reader client.Reader
	// Default is the Secret key that holds the operator-wide webhook URL;
	// a zero Name means none.
	Default SecretKey
	// Namespaced reads each namespace's own NamespaceSecret first.
	Namespaced bool
	// Client posts to the operator-wide webhook (chosen by whoever
	// installs the operator); TenantClient to a namespace's own, which
	// anyone who may write Secrets in that namespace chooses, so it should
	// go through the egress policy of model and tool calls.
	Client, TenantClient *http.Client
}

// SecretKey names one key of one Secret.
type SecretKey struct{ Namespace, Name, Key string }

// ParseSecretKey reads NAMESPACE/NAME/KEY (KEY defaults to "url").
func ParseSecretKey(s string) (SecretKey, error) {
	if s == "" {
		return SecretKey{}, nil
	}
	parts := strings.Split(s, "/")
	switch {
	case len(parts) == 2 && parts[0] != "" && parts[1] != "":
		return SecretKey{Namespace: parts[0], Name: parts[1], Key: "url"}, nil
	case len(parts) == 3 && parts[0] != "" && parts[1] != "" && parts[2] != "":
		return SecretKey{Namespace: parts[0], Name: parts[1], Key: parts[2]}, nil
	}
	return SecretKey{}, fmt.Errorf("%q: want NAMESPACE/NAME or NAMESPACE/NAME/KEY", s)
}

// Resolve implements Resolver.
func (r *SecretResolver) Resolve(ctx context.Context, namespace string) (Target, error) {
	s := &corev1.Secret{}
	if r.Namespaced {
		err := r.Reader.Get(ctx, types.NamespacedName{Namespace: namespace, Name: NamespaceSecret}, s)
		switch {
		case err == nil:
			sg, err := signer(s)
			if err != nil {
				return Target{}, err
			}
			return Target{URL: strings.TrimSpace(string(s.Data[NamespaceKey])), Client: r.TenantClient, Signer: sg}, nil
		case !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err):
			return Target{}, fmt.Errorf("reading Secret %s/%s: %w", namespace, NamespaceSecret, err)
		}
	}
	if r.Default.Name == "" {
		return Target{}, nil
	}
	if err := r.Reader.Get(ctx, types.NamespacedName{Namespace: r.Default.Namespace, Name: r.Default.Name}, s); err != nil {
		return Target{}, fmt.Errorf("reading Secret %s/%s: %w", r.Default.Namespace, r.Default.Name, err)
	}
	u, ok := s.Data[r.Default.Key]
	if !ok {
		return Target{}, fmt.Errorf("Secret %s/%s has no key %q", r.Default.Namespace, r.Default.Name, r.Default.Key)
	}
	sg, err := signer(s)
	if err != nil {
		return Target{}, err
	}
	return Target{URL: strings.TrimSpace(string(u)), Client: r.Client, Signer: sg}, nil
}
