package loop

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/agentrun/agentrun/internal/clip"
)

// Canonical returns the canonical JSON form of a call's arguments: object
// keys sorted, numbers normalised (1.0, 1e0, 10e-1 and 1 are the same
// number), insignificant whitespace removed, strings escaped only where JSON
// requires it (no HTML escaping), and the argument names in ignore left out
// at every depth. Two proposals with the same intent produce the same bytes
// whatever their key order, spacing or volatile ids.
//
// The work is proportional to the size of args: numbers are normalised as
// text, never expanded (1e999999 stays 1e999999).
func Canonical(args json.RawMessage, ignore []string) ([]byte, error) {
	v, err := decodeJSON(args)
	if err != nil {
		return nil, err
	}
	c := canonicalOf(v, ignore, len(args))
	if c.err != nil {
		return nil, c.err
	}
	return c.buf.Bytes(), nil
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
	// Decoder.More stops at a closing bracket, so the rest is checked
	// whole: `{"a":1}]...` is not one value either.
	if len(bytes.TrimSpace(args[dec.InputOffset():])) > 0 {
		return nil, fmt.Errorf("arguments hold more than one JSON value")
	}
	return v, nil
}

// keysWritten counts the object keys in raw, valid JSON, at every depth:
// the strings followed by a colon. It allocates nothing, so the common
// case (no key repeated) costs one pass over the bytes; keysKept counts
// the keys the decoder kept, and the two differ exactly when some object
// repeats a key.
func keysWritten(raw []byte) int {
	n := 0
	inString, escaped, afterString := false, false, false
	for _, c := range raw {
		switch {
		case inString:
			switch {
			case escaped:
				escaped = false
			case c == '\\':
				escaped = true
			case c == '"':
				inString, afterString = false, true
			}
		case c == '"':
			inString = true
		case c == ' ' || c == '\t' || c == '\n' || c == '\r':
		default:
			if afterString && c == ':' {
				n++
			}
			afterString = false
		}
	}
	return n
}

// keysKept counts the keys of every object in a decoded value.
func keysKept(v any) int {
	switch x := v.(type) {
	case map[string]any:
		n := len(x)
		for _, e := range x {
			n += keysKept(e)
		}
		return n
	case []any:
		n := 0
		for _, e := range x {
			n += keysKept(e)
		}
		return n
	}
	return 0
}

// repeatedKey returns the first key that appears twice in one object of
// raw (valid JSON), and whether one does (the empty key is a key). encoding/json keeps the last
// value of a repeated key, other parsers the first, so the engine never
// vets arguments that read differently to different parsers.
func repeatedKey(raw json.RawMessage) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	// One frame per open object or array: the keys seen (nil for an
	// array) and whether the next token of an object is a key.
	type frame struct {
		keys  map[string]bool
		atKey bool
	}
	var stack []frame
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		top := len(stack) - 1
		if top >= 0 && stack[top].keys != nil && stack[top].atKey {
			if k, ok := tok.(string); ok {
				if stack[top].keys[k] {
					return k, true
				}
				stack[top].keys[k] = true
				stack[top].atKey = false
				continue
			}
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, frame{keys: map[string]bool{}, atKey: true})
			continue
		case json.Delim('['):
			stack = append(stack, frame{})
			continue
		case json.Delim('}'), json.Delim(']'):
			stack = stack[:top]
			top--
		}
		// A value ended: the object around it, if any, expects a key.
		if top >= 0 && stack[top].keys != nil {
			stack[top].atKey = true
		}
		if len(stack) == 0 {
			return "", false
		}
	}
}

// maxArgumentExponent bounds the magnitude of numbers the engine accepts in
// arguments: 1e-1000 to 1e1000 (zero aside), far beyond what float64 or any
// tool can use. Schema validation and policy conditions do exact or float
// arithmetic on numbers; without a bound, a few bytes such as 1e999999
// would make them build million-digit integers.
const maxArgumentExponent = 1000

// canonicalWriter writes the canonical form of a decoded value.
type canonicalWriter struct {
	buf    bytes.Buffer
	enc    *json.Encoder
	ignore []string
	// err is set when a number cannot be normalised (its exponent has more
	// than maxExponentDigits digits); the output is then incomplete.
	err error
	// outOfRange is the first number whose magnitude is beyond
	// 10^±maxArgumentExponent (it is still written).
	outOfRange string
}

func canonicalOf(v any, ignore []string, sizeHint int) *canonicalWriter {
	c := &canonicalWriter{ignore: ignore}
	c.buf.Grow(sizeHint)
	c.enc = json.NewEncoder(&c.buf)
	c.enc.SetEscapeHTML(false)
	c.write(v)
	return c
}

func (c *canonicalWriter) write(v any) {
	switch x := v.(type) {
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			if !slices.Contains(c.ignore, k) {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		c.buf.WriteByte('{')
		for i, k := range keys {
			c.comma(i)
			c.writeString(k)
			c.buf.WriteByte(':')
			c.write(x[k])
		}
		c.buf.WriteByte('}')
	case []any:
		c.buf.WriteByte('[')
		for i, e := range x {
			c.comma(i)
			c.write(e)
		}
		c.buf.WriteByte(']')
	case json.Number:
		d, err := parseDecimal(string(x))
		if err != nil {
			if c.err == nil {
				c.err = err
			}
			c.buf.WriteString(string(x))
			return
		}
		if c.outOfRange == "" && d.digits != "" && (d.order() > maxArgumentExponent || d.order() < -maxArgumentExponent) {
			c.outOfRange = string(x)
		}
		c.buf.WriteString(d.String())
	case string:
		c.writeString(x)
	case bool:
		c.buf.WriteString(strconv.FormatBool(x))
	default: // nil
		c.buf.WriteString("null")
	}
}

// comma separates the i-th element of an object or array from the one
// before it.
func (c *canonicalWriter) comma(i int) {
	if i > 0 {
		c.buf.WriteByte(',')
	}
}

// writeString writes s as a JSON string without HTML escaping, so that
// <, > and & stay as they are.
func (c *canonicalWriter) writeString(s string) {
	_ = c.enc.Encode(s) // cannot fail for a string
	c.buf.Truncate(c.buf.Len() - 1)
}

// maxExponentDigits bounds the digits of a number's exponent (after
// leading zeros): exponent arithmetic stays in an int64.
const maxExponentDigits = 15

// maxPlainZeros is how many zeros a number may gain when written without an
// exponent (100000 for 1e5); beyond it the exponent form is used, so the
// canonical form is never much longer than the literal.
const maxPlainZeros = 21

// decimal is a number as sign, significant digits without leading or
// trailing zeros ("" for zero) and a power of ten: -1.50e3 is {true, "15", 2}.
type decimal struct {
	neg    bool
	digits string
	exp    int64
}

// parseDecimal reads a JSON number literal by string manipulation: the
// cost is linear in the literal's length whatever its value.
func parseDecimal(lit string) (decimal, error) {
	var d decimal
	s := lit
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, expPart, hasExp := s, "", false
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant, expPart, hasExp = s[:i], s[i+1:], true
	}
	intPart, frac := mant, ""
	if i := strings.IndexByte(mant, '.'); i >= 0 {
		intPart, frac = mant[:i], mant[i+1:]
	}
	if intPart == "" || !allDigits(intPart) || !allDigits(frac) || (strings.Contains(mant, ".") && frac == "") {
		return decimal{}, fmt.Errorf("%q is not a number", lit)
	}
	digits := strings.TrimLeft(intPart+frac, "0")
	if digits == "" { // zero, whatever its sign and exponent
		return decimal{}, nil
	}
	trimmed := strings.TrimRight(digits, "0")
	d.digits = trimmed
	d.exp = int64(len(digits)-len(trimmed)) - int64(len(frac))
	if hasExp {
		e, err := parseExponent(expPart)
		if err != nil {
			return decimal{}, fmt.Errorf("number %s: %w", cut(lit, 40), err)
		}
		d.exp += e
	}
	// The canonical form writes the order as its exponent: a literal whose
	// digits push the order past the bound (990e999999999999999) would
	// canonicalise to a form that does not read back.
	if o := d.order(); o > maxExponent || o < -maxExponent {
		return decimal{}, fmt.Errorf("number %s: %w", cut(lit, 40), errExponent)
	}
	return d, nil
}

// maxExponent is the largest exponent of maxExponentDigits digits.
const maxExponent = 999_999_999_999_999

var errExponent = errors.New("the exponent is too large")

func parseExponent(s string) (int64, error) {
	neg := false
	switch {
	case strings.HasPrefix(s, "-"):
		neg, s = true, s[1:]
	case strings.HasPrefix(s, "+"):
		s = s[1:]
	}
	if s == "" || !allDigits(s) {
		return 0, errors.New("the exponent is not a number")
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > maxExponentDigits {
		return 0, errExponent
	}
	var e int64
	for i := 0; i < len(s); i++ {
		e = e*10 + int64(s[i]-'0')
	}
	if neg {
		e = -e
	}
	return e, nil
}

func allDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// order is the power of ten of the leading digit: 2 for 150, -3 for 0.0015.
func (d decimal) order() int64 { return int64(len(d.digits)) + d.exp - 1 }

// String writes the number in one form: without an exponent when that adds
// at most maxPlainZeros zeros (1000, 0.25, 12.5, 0.001), otherwise as
// d.ddde±n with the digits exact (1e999999, 1.5e-30).
func (d decimal) String() string {
	if d.digits == "" {
		return "0"
	}
	var b strings.Builder
	if d.neg {
		b.WriteByte('-')
	}
	n := int64(len(d.digits))
	point := n + d.exp // digits before the decimal point
	switch {
	case d.exp >= 0 && d.exp <= maxPlainZeros:
		b.WriteString(d.digits)
		b.WriteString(strings.Repeat("0", int(d.exp)))
	case d.exp < 0 && point > 0:
		b.WriteString(d.digits[:point])
		b.WriteByte('.')
		b.WriteString(d.digits[point:])
	case d.exp < 0 && -point <= maxPlainZeros:
		b.WriteString("0.")
		b.WriteString(strings.Repeat("0", int(-point)))
		b.WriteString(d.digits)
	default:
		b.WriteString(d.digits[:1])
		if n > 1 {
			b.WriteByte('.')
			b.WriteString(d.digits[1:])
		}
		b.WriteByte('e')
		b.WriteString(strconv.FormatInt(d.order(), 10))
	}
	return b.String()
}

// signature is a call's identity for loop detection: the tool name and
// the canonical arguments (the call id and the result never take part). It
// joins a tool name and canonical arguments; malformed
// arguments (canon nil) still repeat, so they are compared as sent.
func signature(tool string, canon []byte, raw json.RawMessage) string {
	if canon == nil {
		canon = bytes.TrimSpace(raw)
	}
	return tool + string(canon)
}

// SigHashLen is the length of a signature's hash in the loop detector's
// window: the first 12 hex digits (48 bits) of the SHA-256 of the
// signature. Two different calls in a window of 1,000 share one with a
// probability under 1e-8.
const SigHashLen = 12

// sigEntry makes the detector's record of a signature: a short hash to
// compare and a cut text to name it in a reason.
func sigEntry(sig string) SigEntry {
	h := sha256.Sum256([]byte(sig))
	return SigEntry{Hash: hex.EncodeToString(h[:SigHashLen/2]), Text: cut(sig, 120)}
}

// cut shortens s to n bytes of text on a rune boundary, marking the cut
// with an ellipsis (which the n bytes do not count).
func cut(s string, n int) string { return clip.Cut(s, n+len("…"), "…") }

// ArgumentsDigest identifies a call's exact arguments: "sha256:" and the
// hex SHA-256 of their canonical form (Canonical with nothing ignored), so
// that key order and spacing do not change it and any other difference
// does. Arguments that have no canonical form are hashed as sent.
func ArgumentsDigest(args json.RawMessage) string {
	b, err := Canonical(args, nil)
	if err != nil {
		b = args
	}
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// CallArguments returns a tool call's arguments as a JSON value that the
// engine, the state and both provider APIs accept: "{}" when empty, the
// text itself when it is valid JSON, and otherwise the text as a JSON
// string (a model can emit broken JSON; keeping it as a string lets the
// engine refuse it as an invalid call instead of failing to record it).
func CallArguments(raw []byte) json.RawMessage {
	trimmed := bytes.TrimSpace(raw)
	switch {
	case len(trimmed) == 0:
		return json.RawMessage("{}")
	case json.Valid(trimmed):
		return json.RawMessage(trimmed)
	}
	q, _ := json.Marshal(string(raw))
	return q
}

type decodedArgs struct {
	// canon is the canonical form without the ignored argument names, for
	// loop detection; nil when the arguments are not JSON.
	canon []byte
	// full is the canonical form with every argument, for guardrails.
	full []byte
	// value is the decoded object, for the schema and policy conditions;
	// nil when err is set.
	value any
	err   error
}

// decodeArgs parses a call's arguments once. Arguments that are not a JSON
// object, or that hold a number beyond 1e±maxArgumentExponent, are refused
// (err set); their canonical form still serves loop detection.
func decodeArgs(raw json.RawMessage, ignore []string) decodedArgs {
	v, err := decodeJSON(raw)
	if err != nil {
		return decodedArgs{err: err}
	}
	c := canonicalOf(v, ignore, len(raw))
	if c.err != nil {
		return decodedArgs{err: c.err}
	}
	d := decodedArgs{canon: c.buf.Bytes(), full: c.buf.Bytes()}
	if len(ignore) > 0 {
		d.full = canonicalOf(v, nil, len(raw)).buf.Bytes()
	}
	_, isObject := v.(map[string]any)
	repeated, isRepeated := "", false
	if isObject && keysWritten(raw) != keysKept(v) {
		// A repeated key collapsed into one entry: name it.
		repeated, isRepeated = repeatedKey(raw)
	}
	switch {
	case !isObject:
		d.err = errors.New("they are not a JSON object")
	case isRepeated:
		// The checks see the last value of a repeated key and a tool may
		// read the first: such arguments are never vetted.
		d.err = fmt.Errorf("they repeat the key %q in one object; each key may appear once", cut(repeated, 80))
	case c.outOfRange != "":
		d.err = fmt.Errorf("the number %s is out of range: numbers must lie between 1e-%d and 1e%d", cut(c.outOfRange, 40), maxArgumentExponent, maxArgumentExponent)
	default:
		d.value = v
	}
	return d
}
