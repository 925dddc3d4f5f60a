package loop

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
)

func TestCanonical_numbers(t *testing.T) {
	cases := []struct{ in, want string }{
		{"1", "1"}, {"1.0", "1"}, {"1e0", "1"}, {"10e-1", "1"}, {"0.1e1", "1"}, {"100E-2", "1"},
		{"-0", "0"}, {"-0.0e5", "0"}, {"0e99999999999999999999999", "0"},
		{"1e3", "1000"}, {"1200", "1200"}, {"0.50", "0.5"}, {"2.5e-1", "0.25"}, {"-12.50", "-12.5"},
		{"123.456", "123.456"}, {"0.001", "0.001"}, {"1e-21", "0.000000000000000000001"},
		{"4111111111111111", "4111111111111111"}, {"4.111111111111111e15", "4111111111111111"},
		{"1e21", "1000000000000000000000"}, {"1e22", "1e22"}, {"10e21", "1e22"}, {"123e40", "1.23e42"},
		{"1e-22", "0.0000000000000000000001"}, {"1e-23", "1e-23"}, {"-1.5e-30", "-1.5e-30"}, {"0.00015e-30", "1.5e-34"},
		{"1e999999", "1e999999"}, {"10e999998", "1e999999"}, {"1E+999999", "1e999999"}, {"0.1e-999999", "1e-1000000"},
		{"123456789012345678901234567890", "123456789012345678901234567890"},
		// The largest order the canonical form can write, from either side.
		{"9e999999999999999", "9e999999999999999"}, {"0.9e-999999999999998", "9e-999999999999999"},
	}
	for _, tc := range cases {
		got, err := Canonical(json.RawMessage(`[`+tc.in+`]`), nil)
		if err != nil {
			t.Errorf("Canonical(%s): %v", tc.in, err)
			continue
		}
		if string(got) != "["+tc.want+"]" {
			t.Errorf("Canonical(%s) = %s, want [%s]", tc.in, got, tc.want)
		}
	}
	if _, err := Canonical(json.RawMessage(`[1e1234567890123456789]`), nil); err == nil || !strings.Contains(err.Error(), "exponent") {
		t.Errorf("a 19-digit exponent: err = %v", err)
	}
	// Found by fuzzing in CI: digits that push the order past 15 digits
	// once gave a canonical form that does not read back.
	for _, lit := range []string{"990e999999999999999", "10e999999999999999", "0.01e-999999999999999"} {
		if _, err := Canonical(json.RawMessage(`[`+lit+`]`), nil); !errors.Is(err, errExponent) {
			t.Errorf("Canonical(%s): err = %v, want the exponent refused", lit, err)
		}
	}
}

func TestCanonical_stringsAreNotHTMLEscaped(t *testing.T) {
	got, err := Canonical(json.RawMessage(`{"s":"<a href=\"x\">&amp;</a>\u0026\n"}`), nil)
	if err != nil {
		t.Fatal(err)
	}
	if want := `{"s":"<a href=\"x\">&amp;</a>&\n"}`; string(got) != want {
		t.Fatalf("got %s, want %s", got, want)
	}
}

// hugeExponents is the reproduction of issue 9, item 8: 100 numbers such as
// 1e999999 in under 2 KB of arguments.
func hugeExponents() json.RawMessage {
	var b strings.Builder
	b.WriteString(`{"xs":[`)
	for i := range 100 {
		if i > 0 {
			b.WriteByte(',')
		}
		b.WriteString("1e999999")
	}
	b.WriteString(`]}`)
	return json.RawMessage(b.String())
}

// BenchmarkCanonicalHugeExponents canonicalises 100 numbers like 1e999999:
// the work must follow the literal's length, not its value. With exact
// rationals (before) it took about 9 s and 630 MB.
func BenchmarkCanonicalHugeExponents(b *testing.B) {
	args := hugeExponents()
	b.ReportAllocs()
	for b.Loop() {
		c, err := Canonical(args, nil)
		if err != nil || len(c) > 2*len(args) {
			b.Fatalf("len %d, err %v", len(c), err)
		}
	}
}

func TestArgumentsDigest_sameForSameArgumentsOnly(t *testing.T) {
	a := ArgumentsDigest(json.RawMessage(`{"amount_minor":8240,"order":"A-1"}`))
	if b := ArgumentsDigest(json.RawMessage(`{ "order":"A-1", "amount_minor":8240 }`)); a != b {
		t.Errorf("key order or spacing changed the digest: %s vs %s", a, b)
	}
	if b := ArgumentsDigest(json.RawMessage(`{"amount_minor":99999999,"order":"A-1"}`)); a == b {
		t.Errorf("different arguments have the same digest %s", a)
	}
	if !strings.HasPrefix(a, "sha256:") || len(a) != len("sha256:")+64 {
		t.Errorf("digest %q is not sha256:<64 hex>", a)
	}
}
