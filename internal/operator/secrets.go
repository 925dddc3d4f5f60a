package operator

import (
	"context"
	"fmt"
	"strings"
	"sync"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/agentrun/agentrun/internal/freshread"
	"github.com/agentrun/agentrun/internal/kit"
	"github.com/agentrun/agentrun/internal/tools/kube"
)

// RunSecrets reads the Secrets a run names (its API key, its tools' header
// values, CA bundles) and the ConfigMaps it names (CA bundles) as the run's ServiceAccount, by impersonation, the way the
// builtin tools read objects. A run therefore gets only the Secrets its
// account may get: naming a Secret in a manifest is not enough. The
// operator's own account needs only "impersonate" on serviceaccounts
// for this, not "get" on Secrets.
type RunSecrets struct {
	cfg *rest.Config

	mu      sync.Mutex
	clients map[string]kubernetes.Interface // by namespace/account
	// reviews shares the access reviews of runs that start together.
	reviews freshread.Group[bool]
}

// NewRunSecrets reads Secrets with cfg, impersonating each run's account.
func NewRunSecrets(cfg *rest.Config) *RunSecrets {
	return &RunSecrets{cfg: cfg, clients: map[string]kubernetes.Interface{}}
}

func (s *RunSecrets) client(namespace, sa string) (kubernetes.Interface, error) {
	key := namespace + "/" + sa
	s.mu.Lock()
	defer s.mu.Unlock()
	if c := s.clients[key]; c != nil {
		return c, nil
	}
	c, err := kubernetes.NewForConfig(kube.Impersonating(s.cfg, namespace, sa))
	if err != nil {
		return nil, err
	}
	s.clients[key] = c
	return c, nil
}

// As returns the reader of one service account's Secrets.
func (s *RunSecrets) As(sa string) kit.SecretReader {
	return func(ctx context.Context, ns, name, key string) (string, error) {
		c, err := s.client(ns, sa)
		if err != nil {
			return "", err
		}
		// Served from the API server's watch cache (resourceVersion 0): a
		// key is read at every model call, and a read from etcd costs the
		// control plane a quorum read each time. The cache follows the
		// Secret within moments, so a rotated key is still used from the
		// next call on; a Secret the cache does not hold yet (created a
		// moment ago) is read from etcd.
		sec, err := c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{ResourceVersion: "0"})
		if apierrors.IsNotFound(err) {
			sec, err = c.CoreV1().Secrets(ns).Get(ctx, name, metav1.GetOptions{})
		}
		if apierrors.IsForbidden(err) {
			return "", forbidden(ns, sa, name)
		}
		if err != nil {
			return "", err
		}
		v, ok := sec.Data[key]
		if !ok {
			return "", fmt.Errorf("secret %s has no key %q", name, key)
		}
		return strings.TrimRight(string(v), "\r\n"), nil
	}
}

// ConfigMapsAs returns the reader of one service account's ConfigMaps
// (caBundleRef.configMapKeyRef), which reads as Secrets are read: a run
// gets only the ConfigMaps its account may get.
func (s *RunSecrets) ConfigMapsAs(sa string) kit.ConfigMapReader {
	return func(ctx context.Context, ns, name, key string) (string, error) {
		c, err := s.client(ns, sa)
		if err != nil {
			return "", err
		}
		// Read once per run build, so from etcd: a bundle created a
		// moment before the run is found.
		cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
		if apierrors.IsForbidden(err) {
			return "", fmt.Errorf("%w: ServiceAccount %s/%s (the run's spec.serviceAccountName) may not get ConfigMap %q; "+
				"grant that account get on the ConfigMap (a Role with resourceNames: [%s] and a RoleBinding)", err, ns, sa, name, name)
		}
		if err != nil {
			return "", err
		}
		if v, ok := cm.Data[key]; ok {
			return v, nil
		}
		if v, ok := cm.BinaryData[key]; ok {
			return string(v), nil
		}
		return "", fmt.Errorf("configmap %s has no key %q", name, key)
	}
}

// Check asks the API server's authorizer, as the service account (a
// SelfSubjectAccessReview, which every authenticated identity may make),
// whether the account may get the Secret. It reads nothing. Runs that
// start together with the same account and Secret share one review that
// began after each of them asked (package freshread), so each still gets
// the authorizer's answer of that moment.
func (s *RunSecrets) Check(ctx context.Context, ns, sa, name string) error {
	c, err := s.client(ns, sa)
	if err != nil {
		return err
	}
	allowed, err := s.reviews.Do(ctx, ns+"/"+sa+"/"+name, func(ctx context.Context) (bool, error) {
		review, err := c.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
			Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
				Namespace: ns, Verb: "get", Resource: "secrets", Name: name,
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return review.Status.Allowed, nil
	})
	if err != nil {
		return fmt.Errorf("asking whether ServiceAccount %s/%s may get Secret %s: %w", ns, sa, name, err)
	}
	if !allowed {
		return forbidden(ns, sa, name)
	}
	return nil
}

func forbidden(ns, sa, name string) error {
	return fmt.Errorf("%w: ServiceAccount %s/%s (the run's spec.serviceAccountName) may not get Secret %q; "+
		"grant that account get on the Secret (a Role with resourceNames: [%s] and a RoleBinding)",
		kit.ErrSecretForbidden, ns, sa, name, name)
}
