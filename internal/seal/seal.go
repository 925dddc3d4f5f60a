// Package seal authenticates the state the operator reads back from
// objects a tenant can write: the checkpoint in a run's status and the
// transcript chunks in its namespace. A seal is an HMAC-SHA256 over the
// stored bytes and what they belong to (the run's UID, the chunk's index,
// the counts status gives), keyed with a secret only the operator holds.
// Anyone may still write those objects; what the operator did not seal it
// never adopts.
//
// A Keyring holds several keys, each with an id: it seals with the
// current key and opens a seal made with any key it holds, so a key is
// rotated by adding a new one, making it current, and removing the old one
// once no stored seal that is still read names it (Needs says which key a
// seal needs).
//
// A seal convinces only whoever holds the key, that is the operator. For
// everyone else the keyring also signs (Sign): each key id has an Ed25519
// key pair derived from that key, and a Verifier, built from the public
// keys alone, checks a signature without being able to make one.
package seal

import (
	"crypto/ed25519"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"maps"
	"slices"
	"strings"
)

// Version prefixes every seal, so that a later format can be told apart.
const Version = "v1"

// MinKeyBytes is the shortest key a Keyring accepts.
const MinKeyBytes = 32

// ErrInvalid: the seal is missing, malformed, made with a key this
// keyring does not hold, or does not match what it is said to seal.
var ErrInvalid = errors.New("not sealed by this operator")

// Keyring seals with its current key and opens with any of its keys. The
// zero value is unusable: build one with New.
type Keyring struct {
	current string
	keys    map[string][]byte
	// signers holds each key's Ed25519 key pair (signingKey), derived
	// once in New.
	signers map[string]ed25519.PrivateKey
}

// New builds a keyring from keys by id; current names the key that seals.
// Ids are short words (letters, digits, '-', '_'), and each key has at
// least MinKeyBytes bytes.
func New(keys map[string][]byte, current string) (*Keyring, error) {
	if len(keys) == 0 {
		return nil, errors.New("seal: no key")
	}
	k := &Keyring{current: current, keys: map[string][]byte{}, signers: map[string]ed25519.PrivateKey{}}
	for id, key := range keys {
		if !validID(id) {
			return nil, fmt.Errorf("seal: key id %q: use 1 to 63 letters, digits, '-' or '_'", id)
		}
		if len(key) < MinKeyBytes {
			return nil, fmt.Errorf("seal: key %q has %d bytes, at least %d are needed", id, len(key), MinKeyBytes)
		}
		k.keys[id] = slices.Clone(key)
		k.signers[id] = signingKey(key)
	}
	if _, ok := k.keys[current]; !ok {
		return nil, fmt.Errorf("seal: the current key %q is not among the keys (%s)", current, strings.Join(k.IDs(), ", "))
	}
	return k, nil
}

// NewKey returns a fresh random key of MinKeyBytes bytes.
func NewKey() []byte {
	b := make([]byte, MinKeyBytes)
	_, _ = rand.Read(b) // crypto/rand.Read never fails (Go 1.24+)
	return b
}

// Ephemeral returns a keyring with one random key, for tests and for a
// process whose seals need not outlive it.
func Ephemeral() *Keyring {
	k, _ := New(map[string][]byte{"ephemeral": NewKey()}, "ephemeral")
	return k
}

// IDs lists the keyring's key ids, sorted.
func (k *Keyring) IDs() []string { return slices.Sorted(maps.Keys(k.keys)) }

// Current is the id of the key that seals.
func (k *Keyring) Current() string { return k.current }

// Seal returns the seal of parts under purpose (which keeps a seal made
// for one kind of object from opening another): "v1.<key id>.<mac>".
func (k *Keyring) Seal(purpose string, parts ...[]byte) string {
	return Version + "." + k.current + "." + base64.RawURLEncoding.EncodeToString(mac(k.keys[k.current], purpose, parts))
}

// Open checks that s seals parts under purpose with one of the keyring's
// keys. Its errors wrap ErrInvalid and say why, never a key.
func (k *Keyring) Open(s, purpose string, parts ...[]byte) error {
	key, got, err := read(s, k.keys, ErrInvalid, "seal", "hold")
	if err != nil {
		return err
	}
	if !hmac.Equal(got, mac(key, purpose, parts)) {
		return fmt.Errorf("%w: its seal does not match its content", ErrInvalid)
	}
	return nil
}

// read takes a seal or signature ("v1.<key id>.<sum>") apart: the key it
// names among keys and its decoded sum. Its errors wrap base and name what
// (a seal, a signature) and what the operator does with the keys.
func read[K any](s string, keys map[string]K, base error, what, does string) (key K, sum []byte, err error) {
	if s == "" {
		return key, nil, fmt.Errorf("%w: it carries no %s", base, what)
	}
	id, enc, ok := split(s)
	if !ok {
		return key, nil, fmt.Errorf("%w: its %s is malformed", base, what)
	}
	if key, ok = keys[id]; !ok {
		return key, nil, fmt.Errorf("%w: its %s names key %q, which the operator does not %s", base, what, id, does)
	}
	if sum, err = base64.RawURLEncoding.DecodeString(enc); err != nil {
		return key, nil, fmt.Errorf("%w: its %s does not match its content", base, what)
	}
	return key, sum, nil
}

// Needs returns the id of the key that opening s needs: the key s names,
// when that key opens it or when the keyring does not hold that key (a
// seal it cannot check, so it cannot tell it from the operator's). It
// returns "" for a seal that needs no key: none, a malformed one, or one
// that names a key the keyring holds and does not match (not the
// operator's: it is refused whatever keys there are).
func (k *Keyring) Needs(s, purpose string, parts ...[]byte) string {
	id, _, ok := split(s)
	if !ok || !validID(id) {
		return ""
	}
	if _, held := k.keys[id]; held && k.Open(s, purpose, parts...) != nil {
		return ""
	}
	return id
}

// split reads a seal or a signature: "v1.<key id>.<sum>".
func split(s string) (id, sum string, ok bool) {
	v, rest, ok1 := strings.Cut(s, ".")
	id, sum, ok2 := strings.Cut(rest, ".")
	return id, sum, ok1 && ok2 && v == Version
}

// mac is the HMAC of purpose and parts (framed).
func mac(key []byte, purpose string, parts [][]byte) []byte {
	h := hmac.New(sha256.New, key)
	frame(h, purpose, parts)
	return h.Sum(nil)
}

// frame writes purpose and parts to h, each length-prefixed so that no
// two different lists of parts give the same input.
func frame(h hash.Hash, purpose string, parts [][]byte) {
	var n [8]byte
	write := func(b []byte) {
		binary.BigEndian.PutUint64(n[:], uint64(len(b)))
		h.Write(n[:])
		h.Write(b)
	}
	write([]byte(purpose))
	for _, p := range parts {
		write(p)
	}
}

func validID(id string) bool {
	if id == "" || len(id) > 63 {
		return false
	}
	for _, r := range id {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (r < '0' || r > '9') && r != '-' && r != '_' {
			return false
		}
	}
	return true
}
