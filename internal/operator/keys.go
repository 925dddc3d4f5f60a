package operator

import (
	"context"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"

	"github.com/agentrun/agentrun/internal/seal"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/retry"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// DefaultKeysSecret is the name of the Secret, in the operator's own
// namespace, that holds the keys sealing runs' saved state.
const DefaultKeysSecret = "agentrun-state-keys"

// AnnotationCurrentKey on the keys Secret names the key that seals; the
// other keys only open seals made before a rotation. Without it, the last
// key id in sorted order seals.
const AnnotationCurrentKey = "agents.agentrun.dev/current-key"

// KeysSecret is where the operator's keys are: ref ("namespace/name"), or
// DefaultKeysSecret in the operator's namespace (POD_NAMESPACE, else the
// namespace of the pod's ServiceAccount, else "default", as under make dev).
func KeysSecret(ref string) (types.NamespacedName, error) {
	if ref != "" {
		ns, name, ok := strings.Cut(ref, "/")
		if !ok || ns == "" || name == "" {
			return types.NamespacedName{}, fmt.Errorf("the state keys Secret %q: want NAMESPACE/NAME", ref)
		}
		return types.NamespacedName{Namespace: ns, Name: name}, nil
	}
	ns := os.Getenv("POD_NAMESPACE")
	if ns == "" {
		if b, err := os.ReadFile("/var/run/secrets/kubernetes.io/serviceaccount/namespace"); err == nil {
			ns = strings.TrimSpace(string(b))
		}
	}
	if ns == "" {
		ns = "default"
	}
	return types.NamespacedName{Namespace: ns, Name: DefaultKeysSecret}, nil
}

// LoadKeys reads the keyring from the Secret at key, creating the Secret
// with one fresh key when it does not exist. Every replica and every
// restart of the operator reads the same Secret, so each opens the seals
// the others made. Two replicas creating it at once agree: the one whose
// create fails reads the other's.
func LoadKeys(ctx context.Context, c client.Client, key types.NamespacedName) (*seal.Keyring, error) {
	sec := &corev1.Secret{}
	err := c.Get(ctx, key, sec)
	if apierrors.IsNotFound(err) {
		sec = &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: key.Name, Namespace: key.Namespace,
				Labels:      map[string]string{"app.kubernetes.io/managed-by": "agentrun"},
				Annotations: map[string]string{AnnotationCurrentKey: "k1"}},
			Type: corev1.SecretTypeOpaque,
			Data: map[string][]byte{"k1": seal.NewKey()},
		}
		err = c.Create(ctx, sec)
		if apierrors.IsAlreadyExists(err) {
			err = c.Get(ctx, key, sec)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("reading the state keys Secret %s: %w", key, err)
	}
	return KeysFrom(sec)
}

// KeysFrom builds the keyring a keys Secret holds: each data item is a key,
// named by its item's name.
func KeysFrom(sec *corev1.Secret) (*seal.Keyring, error) {
	if len(sec.Data) == 0 {
		return nil, fmt.Errorf("the state keys Secret %s/%s holds no key", sec.Namespace, sec.Name)
	}
	current := sec.Annotations[AnnotationCurrentKey]
	if current == "" {
		ids := make([]string, 0, len(sec.Data))
		for id := range sec.Data {
			ids = append(ids, id)
		}
		current = slices.Max(ids)
	}
	k, err := seal.New(sec.Data, current)
	if err != nil {
		return nil, fmt.Errorf("the state keys Secret %s/%s: %w", sec.Namespace, sec.Name, err)
	}
	return k, nil
}

// PublicKeysAt is where the operator publishes the public keys of the
// keyring kept in the Secret at keys: the ConfigMap seal.PublicKeysName
// beside it.
func PublicKeysAt(keys types.NamespacedName) types.NamespacedName {
	return types.NamespacedName{Namespace: keys.Namespace, Name: seal.PublicKeysName(keys.Name)}
}

// PublishKeys writes the public keys of kr, by key id, to the ConfigMap at
// PublicKeysAt(keys), creating it or making it hold exactly them. Everyone
// may read that ConfigMap (the chart grants get on it to every
// authenticated user), so that the console checks, with each person's own
// credentials, which transcript chunks the operator signed; a public key
// lets nobody sign. The operator publishes at each start, so a rotation
// (which takes a restart) is published with it.
func PublishKeys(ctx context.Context, c client.Client, keys types.NamespacedName, kr *seal.Keyring) error {
	at := PublicKeysAt(keys)
	data := seal.MarshalPublicKeys(kr.PublicKeys())
	// Replicas starting together: a create or an update that lost the
	// race reads the winner's and tries again.
	again := func(err error) bool { return apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) }
	err := retry.OnError(retry.DefaultRetry, again, func() error {
		cm := &corev1.ConfigMap{}
		err := c.Get(ctx, at, cm)
		if apierrors.IsNotFound(err) {
			return c.Create(ctx, &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: at.Name, Namespace: at.Namespace,
					Labels: map[string]string{"app.kubernetes.io/managed-by": "agentrun"}},
				Data: data,
			})
		}
		if err != nil {
			return err
		}
		if maps.Equal(cm.Data, data) && len(cm.BinaryData) == 0 {
			return nil
		}
		cm.Data, cm.BinaryData = data, nil
		return c.Update(ctx, cm)
	})
	if err != nil {
		return fmt.Errorf("publishing the state keys' public keys in ConfigMap %s: %w", at, err)
	}
	return nil
}
