package seal

import (
	"errors"
	"strings"
	"testing"
)

func key(b byte) []byte { return []byte(strings.Repeat(string(rune('a'+b)), MinKeyBytes)) }

func TestSealOpens(t *testing.T) {
	k, err := New(map[string][]byte{"k1": key(1)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	s := k.Seal("chunk", []byte("uid"), []byte("0"), []byte(`{"messages":[]}`))
	if !strings.HasPrefix(s, "v1.k1.") {
		t.Fatalf("seal %q does not name its version and key", s)
	}
	if err := k.Open(s, "chunk", []byte("uid"), []byte("0"), []byte(`{"messages":[]}`)); err != nil {
		t.Fatalf("a seal does not open what it sealed: %v", err)
	}
}

func TestAlteredRefused(t *testing.T) {
	k := Ephemeral()
	s := k.Seal("checkpoint", []byte("uid-a"), []byte("state"))
	cases := map[string]func() error{
		"other content": func() error { return k.Open(s, "checkpoint", []byte("uid-a"), []byte("state!")) },
		"other run":     func() error { return k.Open(s, "checkpoint", []byte("uid-b"), []byte("state")) },
		"other purpose": func() error { return k.Open(s, "chunk", []byte("uid-a"), []byte("state")) },
		// Length prefixes: moving a byte from one part to the next is
		// another input.
		"shifted parts": func() error { return k.Open(s, "checkpoint", []byte("uid-"), []byte("astate")) },
		"no seal":       func() error { return k.Open("", "checkpoint", []byte("uid-a"), []byte("state")) },
		"malformed":     func() error { return k.Open("garbage", "checkpoint", []byte("uid-a"), []byte("state")) },
		"bad base64":    func() error { return k.Open("v1.ephemeral.!!", "checkpoint", []byte("uid-a"), []byte("state")) },
		"other version": func() error { return k.Open("v0"+s[2:], "checkpoint", []byte("uid-a"), []byte("state")) },
		"other key": func() error {
			return Ephemeral().Open(s, "checkpoint", []byte("uid-a"), []byte("state"))
		},
	}
	for name, open := range cases {
		t.Run(name, func(t *testing.T) {
			err := open()
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("got %v, want ErrInvalid", err)
			}
		})
	}
}

// A key is rotated by adding a new one that seals: seals made with the old
// one still open while it is held, and no longer once it is removed.
func TestRotation(t *testing.T) {
	old, err := New(map[string][]byte{"k1": key(1)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	s1 := old.Seal("p", []byte("x"))
	both, err := New(map[string][]byte{"k1": key(1), "k2": key(2)}, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if err := both.Open(s1, "p", []byte("x")); err != nil {
		t.Fatalf("a seal of the old key no longer opens during the rotation: %v", err)
	}
	s2 := both.Seal("p", []byte("x"))
	if !strings.HasPrefix(s2, "v1.k2.") {
		t.Fatalf("the new key does not seal: %q", s2)
	}
	onlyNew, err := New(map[string][]byte{"k2": key(2)}, "k2")
	if err != nil {
		t.Fatal(err)
	}
	if err := onlyNew.Open(s2, "p", []byte("x")); err != nil {
		t.Fatal(err)
	}
	err = onlyNew.Open(s1, "p", []byte("x"))
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `"k1"`) {
		t.Fatalf("a seal of a removed key: got %v, want an error naming the key", err)
	}
}

func TestNewRefusesBadKeys(t *testing.T) {
	for name, c := range map[string]struct {
		keys    map[string][]byte
		current string
	}{
		"none":            {nil, "k"},
		"short":           {map[string][]byte{"k": []byte("short")}, "k"},
		"bad id":          {map[string][]byte{"k/1": key(1)}, "k/1"},
		"current missing": {map[string][]byte{"k1": key(1)}, "k2"},
	} {
		if _, err := New(c.keys, c.current); err == nil {
			t.Errorf("%s: New accepted it", name)
		}
	}
}

func BenchmarkSealCheckpoint(b *testing.B) {
	k := Ephemeral()
	state := []byte(strings.Repeat("x", 4<<10))
	b.SetBytes(int64(len(state)))
	for b.Loop() {
		_ = k.Open(k.Seal("checkpoint", []byte("uid"), state), "checkpoint", []byte("uid"), state)
	}
}

// Needs names the key a seal needs to open, so that an operator can say
// which keys a rotation may not remove yet: the key of a seal it opens, or
// of one it cannot check for want of the key; no key for what is not the
// operator's.
func TestNeeds(t *testing.T) {
	old, err := New(map[string][]byte{"k1": key(1)}, "k1")
	if err != nil {
		t.Fatal(err)
	}
	rotated, err := New(map[string][]byte{"k1": key(1), "k2": key(2)}, "k2")
	if err != nil {
		t.Fatal(err)
	}
	without, err := New(map[string][]byte{"k2": key(2)}, "k2")
	if err != nil {
		t.Fatal(err)
	}
	parts := [][]byte{[]byte("uid"), []byte("0")}
	byOld, byNew := old.Seal("chunk", parts...), rotated.Seal("chunk", parts...)
	cases := []struct {
		name    string
		k       *Keyring
		s, want string
	}{
		{"an old seal the rotated keyring opens", rotated, byOld, "k1"},
		{"a new seal", rotated, byNew, "k2"},
		{"an old seal after its key is gone", without, byOld, "k1"},
		{"a seal that does not match its content", rotated, "v1.k1.AAAA", ""},
		{"no seal", rotated, "", ""},
		{"malformed", rotated, "v1.k1", ""},
		{"a bad key id", rotated, "v1.k/1.AAAA", ""},
	}
	for _, c := range cases {
		if got := c.k.Needs(c.s, "chunk", parts...); got != c.want {
			t.Errorf("%s: Needs = %q, want %q", c.name, got, c.want)
		}
	}
}
