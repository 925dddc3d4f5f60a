package seal

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// verifierOf is what a reader of the published keys builds: a verifier
// from the keyring's public keys as the operator writes them.
func verifierOf(t testing.TB, k *Keyring) *Verifier {
	t.Helper()
	v, err := ParsePublicKeys(MarshalPublicKeys(k.PublicKeys()))
	if err != nil {
		t.Fatal(err)
	}
	return v
}

func TestSignVerifies(t *testing.T) {
	k, err := New(map[string][]byte{"k1": key(1)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	sig := k.Sign("chunk", []byte("uid"), []byte("0"), []byte(`{"messages":[]}`))
	if !strings.HasPrefix(sig, "v1.k1.") {
		t.Fatalf("signature %q does not name its version and key", sig)
	}
	if err := verifierOf(t, k).Verify(sig, "chunk", []byte("uid"), []byte("0"), []byte(`{"messages":[]}`)); err != nil {
		t.Fatalf("a signature does not verify what it signed: %v", err)
	}
}

// The key pair is derived from the key: a keyring built again from the
// same keys (another replica, a restart) signs with the same pair, and
// another key gives another pair.
func TestSigningKeyIsDerivedFromTheKey(t *testing.T) {
	a, _ := New(map[string][]byte{"k1": key(1)}, "k1")
	b, _ := New(map[string][]byte{"k1": key(1), "k2": key(2)}, "k2")
	if diff := cmp.Diff(a.PublicKeys()["k1"], b.PublicKeys()["k1"]); diff != "" {
		t.Errorf("the same key gives another public key (-first +second):\n%s", diff)
	}
	if a.PublicKeys()["k1"].Equal(b.PublicKeys()["k2"]) {
		t.Error("two keys give the same public key")
	}
	if err := verifierOf(t, b).Verify(a.Sign("p", []byte("x")), "p", []byte("x")); err != nil {
		t.Errorf("a signature of k1 does not verify with the rotated keyring's keys: %v", err)
	}
}

func TestVerifyRefuses(t *testing.T) {
	k := Ephemeral()
	v := verifierOf(t, k)
	sig := k.Sign("chunk", []byte("uid-a"), []byte("0"), []byte("text"))
	cases := map[string]func() error{
		"altered part":  func() error { return v.Verify(sig, "chunk", []byte("uid-a"), []byte("0"), []byte("text!")) },
		"other run":     func() error { return v.Verify(sig, "chunk", []byte("uid-b"), []byte("0"), []byte("text")) },
		"other index":   func() error { return v.Verify(sig, "chunk", []byte("uid-a"), []byte("1"), []byte("text")) },
		"wrong purpose": func() error { return v.Verify(sig, "checkpoint", []byte("uid-a"), []byte("0"), []byte("text")) },
		"shifted parts": func() error { return v.Verify(sig, "chunk", []byte("uid-"), []byte("a0"), []byte("text")) },
		"no signature":  func() error { return v.Verify("", "chunk", []byte("uid-a"), []byte("0"), []byte("text")) },
		"malformed":     func() error { return v.Verify("garbage", "chunk", []byte("uid-a"), []byte("0"), []byte("text")) },
		"bad base64": func() error {
			return v.Verify("v1.ephemeral.!!", "chunk", []byte("uid-a"), []byte("0"), []byte("text"))
		},
		"unknown id": func() error {
			return v.Verify("v1.k9"+sig[len("v1.ephemeral"):], "chunk", []byte("uid-a"), []byte("0"), []byte("text"))
		},
		"another keyring's key under the same id": func() error {
			return verifierOf(t, Ephemeral()).Verify(sig, "chunk", []byte("uid-a"), []byte("0"), []byte("text"))
		},
		// A seal is not a signature, even over the same input.
		"a seal": func() error {
			return v.Verify(k.Seal("chunk", []byte("uid-a"), []byte("0"), []byte("text")), "chunk", []byte("uid-a"), []byte("0"), []byte("text"))
		},
	}
	for name, verify := range cases {
		t.Run(name, func(t *testing.T) {
			if err := verify(); !errors.Is(err, ErrNotSigned) {
				t.Fatalf("got %v, want ErrNotSigned", err)
			}
		})
	}
}

// A Verifier holds public keys and nothing else, and has no way to sign:
// whoever may read the published keys cannot make a signature.
func TestVerifierCannotSign(t *testing.T) {
	typ := reflect.TypeFor[Verifier]()
	for i := range typ.NumField() {
		if f := typ.Field(i); f.Type != reflect.TypeFor[map[string]ed25519.PublicKey]() {
			t.Errorf("Verifier.%s is a %s: a verifier holds public keys only", f.Name, f.Type)
		}
	}
	for _, m := range []string{"Sign", "Seal", "Open"} {
		if _, ok := reflect.TypeFor[*Verifier]().MethodByName(m); ok {
			t.Errorf("Verifier has a method %s", m)
		}
	}
}

func TestParsePublicKeysRefusesBadKeys(t *testing.T) {
	good := MarshalPublicKeys(Ephemeral().PublicKeys())["ephemeral"]
	for name, data := range map[string]map[string]string{
		"none":       nil,
		"not base64": {"k1": "!!"},
		"short":      {"k1": "AAAA"},
		"bad id":     {"k/1": good},
	} {
		if _, err := ParsePublicKeys(data); err == nil {
			t.Errorf("%s: ParsePublicKeys accepted it", name)
		}
	}
}

// Signing a transcript chunk costs one SHA-512 pass over it and one
// Ed25519 signature, beside its seal's HMAC-SHA256 pass: compare the two
// on a small chunk and on the largest the operator writes (768 KiB).
func BenchmarkSignAndSealChunk(b *testing.B) {
	k := Ephemeral()
	for _, size := range []int{1 << 10, 768 << 10} {
		data := []byte(strings.Repeat("x", size))
		for name, f := range map[string]func(string, ...[]byte) string{"sign": k.Sign, "seal": k.Seal} {
			b.Run(fmt.Sprintf("%s/%dKiB", name, size>>10), func(b *testing.B) {
				b.SetBytes(int64(size))
				for b.Loop() {
					_ = f("chunk", []byte("uid"), []byte("0"), data)
				}
			})
		}
	}
}
