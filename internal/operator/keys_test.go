package operator

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/agentrun/agentrun/internal/seal"
	"github.com/google/go-cmp/cmp"
	. "github.com/onsi/gomega"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// The operator started by TestMain made its keys Secret (in "default": no
// POD_NAMESPACE here); every later load reads the same keys, so a restart
// or another replica opens the seals the first made.
func TestLoadKeys_createsTheSecretOnceAndReadsItBack(t *testing.T) {
	ctx := context.Background()
	at := types.NamespacedName{Namespace: "default", Name: DefaultKeysSecret}
	sec := &corev1.Secret{}
	// TestMain starts the operator without waiting for it.
	NewWithT(t).Eventually(func() error { return admin.Get(ctx, at, sec) }, 20*time.Second, 50*time.Millisecond).Should(Succeed(),
		"the operator did not create its keys Secret")
	if len(sec.Data["k1"]) != 32 || sec.Annotations[AnnotationCurrentKey] != "k1" {
		t.Fatalf("keys Secret: %d key bytes, current %q; want a 32-byte k1", len(sec.Data["k1"]), sec.Annotations[AnnotationCurrentKey])
	}
	first, err := LoadKeys(ctx, admin, at)
	if err != nil {
		t.Fatal(err)
	}
	again, err := LoadKeys(ctx, admin, at)
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Open(first.Seal("p", []byte("x")), "p", []byte("x")); err != nil {
		t.Fatalf("a seal of one load does not open with the next: %v", err)
	}
	// A Secret of another name is made on its first load.
	other := types.NamespacedName{Namespace: "default", Name: "keys-" + strings.ToLower(t.Name())[:8]}
	k, err := LoadKeys(ctx, admin, other)
	if err != nil || k.Current() != "k1" {
		t.Fatalf("LoadKeys of a missing Secret: %v, current %q", err, k.Current())
	}
}

func TestKeysFrom_rotation(t *testing.T) {
	k1, k2 := []byte(strings.Repeat("a", 32)), []byte(strings.Repeat("b", 32))
	sec := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s", Namespace: "n"}, Data: map[string][]byte{"k1": k1, "k2": k2}}
	kr, err := KeysFrom(sec)
	if err != nil || kr.Current() != "k2" {
		t.Fatalf("without the annotation the last key seals: %v, current %q", err, kr.Current())
	}
	sec.Annotations = map[string]string{AnnotationCurrentKey: "k1"}
	if kr, err = KeysFrom(sec); err != nil || kr.Current() != "k1" {
		t.Fatalf("the annotation names the sealing key: %v, current %q", err, kr.Current())
	}
	sec.Annotations[AnnotationCurrentKey] = "k3"
	if _, err := KeysFrom(sec); err == nil || !strings.Contains(err.Error(), `"k3"`) {
		t.Fatalf("a current key the Secret lacks: %v", err)
	}
	sec.Data = map[string][]byte{"short": []byte("abc")}
	sec.Annotations = nil
	if _, err := KeysFrom(sec); err == nil || !strings.Contains(err.Error(), "n/s") {
		t.Fatalf("a short key: %v, want an error naming the Secret", err)
	}
}

func TestKeysSecret(t *testing.T) {
	if at, err := KeysSecret("agentrun-system/keys"); err != nil || at.String() != "agentrun-system/keys" {
		t.Fatalf("%v %v", at, err)
	}
	if _, err := KeysSecret("keys"); err == nil {
		t.Fatal("a reference without a namespace was accepted")
	}
	t.Setenv("POD_NAMESPACE", "agentrun-system")
	if at, err := KeysSecret(""); err != nil || at.String() != "agentrun-system/"+DefaultKeysSecret {
		t.Fatalf("%v %v", at, err)
	}
}

// The operator publishes the public keys of its keys in a ConfigMap
// beside the keys Secret, and a signature it makes verifies with them.
// Publishing again after a rotation (the operator does at each start)
// makes the ConfigMap hold exactly the Secret's keys: the new one, and the
// old one until it is removed.
func TestPublishKeys_publishesThePublicKeysOfTheSecretsKeys(t *testing.T) {
	ctx := context.Background()
	at := types.NamespacedName{Namespace: "default", Name: DefaultKeysSecret}
	cm := &corev1.ConfigMap{}
	NewWithT(t).Eventually(func() error { return admin.Get(ctx, PublicKeysAt(at), cm) }, 20*time.Second, 50*time.Millisecond).Should(Succeed(),
		"the operator did not publish its public keys")
	if cm.Name != "agentrun-state-keys-public" {
		t.Errorf("the public keys are in ConfigMap %s", cm.Name)
	}
	kr, err := LoadKeys(ctx, admin, at)
	if err != nil {
		t.Fatal(err)
	}
	v, err := seal.ParsePublicKeys(cm.Data)
	if err != nil {
		t.Fatal(err)
	}
	if err := v.Verify(kr.Sign("p", []byte("x")), "p", []byte("x")); err != nil {
		t.Fatalf("the operator's signature does not verify with its published keys: %v", err)
	}

	keys := types.NamespacedName{Namespace: "default", Name: "rotated-keys"}
	published := func(kr *seal.Keyring) *seal.Verifier {
		t.Helper()
		if err := PublishKeys(ctx, admin, keys, kr); err != nil {
			t.Fatal(err)
		}
		got := &corev1.ConfigMap{}
		if err := admin.Get(ctx, PublicKeysAt(keys), got); err != nil {
			t.Fatal(err)
		}
		v, err := seal.ParsePublicKeys(got.Data)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	k1, k2 := seal.NewKey(), seal.NewKey()
	before, _ := seal.New(map[string][]byte{"k1": k1}, "k1")
	during, _ := seal.New(map[string][]byte{"k1": k1, "k2": k2}, "k2")
	after, _ := seal.New(map[string][]byte{"k2": k2}, "k2")
	old := before.Sign("p", []byte("x"))
	for _, c := range []struct {
		name    string
		kr      *seal.Keyring
		want    []string
		oldOpen bool
	}{
		{"first start", before, []string{"k1"}, true},
		{"a key added and made current", during, []string{"k1", "k2"}, true},
		{"published again, unchanged", during, []string{"k1", "k2"}, true},
		{"the old key removed", after, []string{"k2"}, false},
	} {
		v := published(c.kr)
		if diff := cmp.Diff(c.want, v.IDs()); diff != "" {
			t.Errorf("%s: published keys (-want +got):\n%s", c.name, diff)
		}
		if err := v.Verify(c.kr.Sign("p", []byte("x")), "p", []byte("x")); err != nil {
			t.Errorf("%s: the current key's signature: %v", c.name, err)
		}
		if err := v.Verify(old, "p", []byte("x")); (err == nil) != c.oldOpen {
			t.Errorf("%s: a signature of the old key: %v, want it to verify: %v", c.name, err, c.oldOpen)
		}
	}
}
