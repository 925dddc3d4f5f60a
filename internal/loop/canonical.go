package loop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"
)

// Canonical returns the canonical JSON form of a call's arguments: object
// keys sorted, numbers normalised (1.0, 1e0 and 1 are the same number),
// insignificant whitespace removed, and the argument names in ignore left
// out at every depth. Two proposals with the same intent produce the same
// bytes whatever their key order, spacing or volatile ids.
func Canonical(args json.RawMessage, ignore []string) ([]byte, error) {
	v, err := decodeJSON(args)
	if err != nil {
		return nil, err
	}
	return canonicalOf(v, ignore, len(args)), nil
}

// decodeJSON decodes one JSON value with numbers kept exact; empty input
// is the empty object.
func decodeJSON(args json.RawMessage) (any, error) {
	if len(bytes.TrimSpace(args)) == 0 {
		return map[string]any{}, nil
	}
	dec := json.NewDecoder(bytes.NewReader(args))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return nil, fmt.Errorf("arguments are not valid JSON: %w", err)
	}
	if dec.More() {
		return nil, fmt.Errorf("arguments hold more than one JSON value")
	}
	return v, nil
}

func canonicalOf(v any, ignore []string, sizeHint int) []byte {
	var buf bytes.Buffer
	buf.Grow(sizeHint)
	writeCanonical(&buf, v, ignore)
	return buf.Bytes()
}

func writeCanonical(buf *bytes.Buffer, v any, ignore []string) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			if !slices.Contains(ignore, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		buf.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeString(buf, k)
			buf.WriteByte(':')
			writeCanonical(buf, x[k], ignore)
		}
		buf.WriteByte('}')
	case []any:
		buf.WriteByte('[')
		for i, e := range x {
			if i > 0 {
				buf.WriteByte(',')
			}
			writeCanonical(buf, e, ignore)
		}
		buf.WriteByte(']')
	case json.Number:
		buf.WriteString(normalNumber(x))
	case string:
		writeString(buf, x)
	case bool:
		buf.WriteString(strconv.FormatBool(x))
	default: // nil
		buf.WriteString("null")
	}
}

func writeString(buf *bytes.Buffer, s string) {
	b, _ := json.Marshal(s) // cannot fail for a string
	buf.Write(b)
}

// normalNumber writes a JSON number in one form: integers without a
// fraction or exponent, other values in the shortest exact decimal form.
func normalNumber(n json.Number) string {
	s := string(n)
	if !strings.ContainsAny(s, ".eE") {
		if s == "-0" {
			return "0"
		}
		return s
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return s
	}
	if r.IsInt() {
		return r.Num().String()
	}
	// A terminating decimal: find the exact number of fraction digits.
	d := r.Denom()
	digits := 0
	ten := big.NewInt(10)
	for t := new(big.Int).Set(d); t.Cmp(big.NewInt(1)) != 0 && digits < 400; digits++ {
		g := new(big.Int).GCD(nil, nil, t, ten)
		if g.Cmp(big.NewInt(1)) == 0 {
			break
		}
		t.Quo(t, g)
	}
	out := r.FloatString(digits)
	if strings.Contains(out, ".") {
		out = strings.TrimRight(strings.TrimRight(out, "0"), ".")
	}
	return out
}

// Signature is a call's identity for loop detection: the tool name and
// the canonical arguments. The call id and the result never take part.
func Signature(tool string, args json.RawMessage, ignore []string) string {
	c, _ := Canonical(args, ignore)
	return signature(tool, c, args)
}

// signature joins a tool name and canonical arguments; malformed
// arguments (canon nil) still repeat, so they are compared as sent.
func signature(tool string, canon []byte, raw json.RawMessage) string {
	if canon == nil {
		canon = bytes.TrimSpace(raw)
	}
	return tool + string(canon)
}

// sigEntry makes the detector's record of a signature: a short hash to
// compare and a cut text to name it in a reason.
func sigEntry(sig string) SigEntry {
	h := sha256.Sum256([]byte(sig))
	return SigEntry{Hash: hex.EncodeToString(h[:8]), Text: cut(sig, 120)}
}

// cut shortens s to at most n bytes on a rune boundary, marking the cut.
func cut(s string, n int) string {
	if len(s) <= n {
		return s
	}
	i := n
	for i > 0 && !utf8RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}

func utf8RuneStart(b byte) bool { return b&0xC0 != 0x80 }
