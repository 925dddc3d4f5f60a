package seal

import (
	"crypto"
	"crypto/ed25519"
	"crypto/hkdf"
	"crypto/sha256"
	"crypto/sha512"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// ErrNotSigned: the signature is missing, malformed, made with a key the
// verifier does not know, or does not match what it is said to sign.
var ErrNotSigned = errors.New("not signed by the operator")

// signInfo is the HKDF info that derives a key's Ed25519 seed from the
// key: the same key always gives the same key pair, so every replica and
// every restart signs alike, and rotating the key rotates the pair.
const signInfo = "agentrun/seal: ed25519 signing key v1"

// signContext is the Ed25519ph context of every signature (RFC 8032), so
// that no other use of such a key pair could produce one.
const signContext = "agentrun/seal v1"

// PublicKeysName is the name of the ConfigMap where the operator
// publishes the public keys of the keyring kept in the Secret named
// keysSecret, in the same namespace: agentrun-state-keys-public beside
// agentrun-state-keys, so that whoever knows where the keys are finds what
// checks their signatures.
func PublicKeysName(keysSecret string) string { return keysSecret + "-public" }

// signingKey derives the Ed25519 key pair of a keyring key. The seed is
// HKDF-SHA256 of the key: a seal (an HMAC keyed with the key itself)
// reveals nothing of it.
func signingKey(key []byte) ed25519.PrivateKey {
	seed, err := hkdf.Key(sha256.New, key, nil, signInfo, ed25519.SeedSize)
	if err != nil {
		panic(err) // only for a length HKDF cannot give; SeedSize is 32
	}
	return ed25519.NewKeyFromSeed(seed)
}

// Sign returns the signature of parts under purpose with the current
// key's Ed25519 key: "v1.<key id>.<signature>". Anyone with the public
// keys (Verifier) checks it; only a keyring makes one.
func (k *Keyring) Sign(purpose string, parts ...[]byte) string {
	sig, err := k.signers[k.current].Sign(nil, digest(purpose, parts), signOptions())
	if err != nil {
		panic(err) // Ed25519ph with a SHA-512 digest and a short context never fails
	}
	return Version + "." + k.current + "." + base64.RawURLEncoding.EncodeToString(sig)
}

// PublicKeys returns the public key of each of the keyring's keys, by id.
func (k *Keyring) PublicKeys() map[string]ed25519.PublicKey {
	out := make(map[string]ed25519.PublicKey, len(k.signers))
	for id, priv := range k.signers {
		out[id] = priv.Public().(ed25519.PublicKey)
	}
	return out
}

// Verifier checks signatures (Keyring.Sign) with public keys only: it
// cannot make one. Build it with NewVerifier or ParsePublicKeys.
type Verifier struct {
	keys map[string]ed25519.PublicKey
}

// NewVerifier builds a verifier from public keys by key id.
func NewVerifier(keys map[string]ed25519.PublicKey) (*Verifier, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no public key")
	}
	v := &Verifier{keys: make(map[string]ed25519.PublicKey, len(keys))}
	for id, key := range keys {
		if !validID(id) {
			return nil, fmt.Errorf("seal: key id %q: use 1 to 63 letters, digits, '-' or '_'", id)
		}
		if len(key) != ed25519.PublicKeySize {
			return nil, fmt.Errorf("seal: public key %q has %d bytes, an Ed25519 public key has %d", id, len(key), ed25519.PublicKeySize)
		}
		v.keys[id] = slices.Clone(key)
	}
	return v, nil
}

// IDs lists the verifier's key ids, sorted.
func (v *Verifier) IDs() []string { return slices.Sorted(maps.Keys(v.keys)) }

// Verify checks that sig signs parts under purpose with one of the
// verifier's keys. Its errors wrap ErrNotSigned and say why.
func (v *Verifier) Verify(sig, purpose string, parts ...[]byte) error {
	key, got, err := read(sig, v.keys, ErrNotSigned, "signature", "publish")
	if err != nil {
		return err
	}
	if ed25519.VerifyWithOptions(key, digest(purpose, parts), got, signOptions()) != nil {
		return fmt.Errorf("%w: its signature does not match its content", ErrNotSigned)
	}
	return nil
}

// MarshalPublicKeys writes public keys as the operator publishes them (a
// ConfigMap's data): key id to the key in standard base64.
func MarshalPublicKeys(keys map[string]ed25519.PublicKey) map[string]string {
	out := make(map[string]string, len(keys))
	for id, key := range keys {
		out[id] = base64.StdEncoding.EncodeToString(key)
	}
	return out
}

// ParsePublicKeys builds a verifier from public keys as MarshalPublicKeys
// writes them.
func ParsePublicKeys(data map[string]string) (*Verifier, error) {
	keys := make(map[string]ed25519.PublicKey, len(data))
	for id, s := range data {
		b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(s))
		if err != nil {
			return nil, fmt.Errorf("seal: public key %q is not base64: %v", id, err)
		}
		keys[id] = b
	}
	return NewVerifier(keys)
}

// digest is the SHA-512 of purpose and parts (framed), which Ed25519ph
// signs: a chunk is hashed once, as for a seal, however large it is.
func digest(purpose string, parts [][]byte) []byte {
	h := sha512.New()
	frame(h, purpose, parts)
	return h.Sum(nil)
}

func signOptions() *ed25519.Options {
	return &ed25519.Options{Hash: crypto.SHA512, Context: signContext}
}
