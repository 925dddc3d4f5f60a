package operator

import (
	"context"
	"strings"
	"testing"
	"time"

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
