package loop

import (
	"errors"
	"fmt"
	"math/bits"
	"strconv"
	"strings"
)

// moneyScale is the number of Money units in one US dollar: amounts are
// exact to 1e-12 USD (a pico-dollar), far below any price a provider quotes.
const moneyScale = 1_000_000_000_000

// moneyFracDigits is the number of decimal places Money keeps.
const moneyFracDigits = 12

// Money is an exact decimal amount of US dollars held as a fixed-point
// integer of pico-dollars. It is never a float: sums and comparisons are
// exact, and the only rounding anywhere is in TokenCost, which rounds up
// so that spend is never under-counted.
//
// Money marshals to and from JSON as a decimal string ("0.28144").
type Money int64

// ParseMoney reads a non-negative decimal string such as "1", "0.30" or
// "15.125". It rejects signs, exponents, more than 12 decimal places and
// anything else that is not plain decimal notation.
func ParseMoney(s string) (Money, error) {
	if s == "" {
		return 0, errors.New("empty amount")
	}
	whole, frac, hasDot := strings.Cut(s, ".")
	if whole == "" || (hasDot && frac == "") {
		return 0, fmt.Errorf("amount %q is not a decimal number like \"1.50\"", s)
	}
	for _, part := range []string{whole, frac} {
		for _, r := range part {
			if r < '0' || r > '9' {
				return 0, fmt.Errorf("amount %q is not a decimal number like \"1.50\"", s)
			}
		}
	}
	if len(frac) > moneyFracDigits {
		return 0, fmt.Errorf("amount %q has more than %d decimal places", s, moneyFracDigits)
	}
	w, err := strconv.ParseInt(whole, 10, 64)
	if err != nil || w > (1<<63-1)/moneyScale {
		return 0, fmt.Errorf("amount %q is too large", s)
	}
	f := int64(0)
	if frac != "" {
		f, _ = strconv.ParseInt(frac+strings.Repeat("0", moneyFracDigits-len(frac)), 10, 64)
	}
	return Money(w*moneyScale + f), nil
}

// MustMoney is ParseMoney for constants in code and tests; it panics on a
// malformed amount.
func MustMoney(s string) Money {
	m, err := ParseMoney(s)
	if err != nil {
		panic(err)
	}
	return m
}

// String formats the amount with at least four decimal places and no
// trailing zeros beyond them: "0.0180", "0.28144", "12.0000".
func (m Money) String() string {
	var buf [32]byte
	return string(m.appendTo(buf[:0]))
}

// AppendText appends the decimal string form to b.
func (m Money) AppendText(b []byte) ([]byte, error) { return m.appendTo(b), nil }

// MarshalText writes the decimal string form.
func (m Money) MarshalText() ([]byte, error) { return m.appendTo(nil), nil }

func (m Money) appendTo(b []byte) []byte {
	u := uint64(m)
	if m < 0 {
		b = append(b, '-')
		u = -u
	}
	b = strconv.AppendUint(b, u/moneyScale, 10)
	b = append(b, '.')
	// The twelve decimal places, zero-padded, then trailing zeros cut down
	// to the fourth.
	var frac [moneyFracDigits]byte
	f := u % moneyScale
	for i := moneyFracDigits - 1; i >= 0; i-- {
		frac[i] = byte('0' + f%10)
		f /= 10
	}
	n := moneyFracDigits
	for n > 4 && frac[n-1] == '0' {
		n--
	}
	return append(b, frac[:n]...)
}

// UnmarshalText reads the decimal string form.
func (m *Money) UnmarshalText(b []byte) error {
	s := string(b)
	neg := strings.HasPrefix(s, "-")
	v, err := ParseMoney(strings.TrimPrefix(s, "-"))
	if err != nil {
		return err
	}
	if neg {
		v = -v
	}
	*m = v
	return nil
}

// TokenCost is the price of tokens at perMillion dollars per million
// tokens, rounded up to the next pico-dollar. The product is formed in 128
// bits, so it cannot overflow for any realistic count or price.
func TokenCost(tokens int64, perMillion Money) Money {
	if tokens <= 0 || perMillion <= 0 {
		return 0
	}
	hi, lo := bits.Mul64(uint64(tokens), uint64(perMillion))
	if hi >= 1_000_000 {
		return Money(1<<63 - 1)
	}
	q, r := bits.Div64(hi, lo, 1_000_000)
	if r != 0 {
		q++
	}
	if q > 1<<63-1 {
		return Money(1<<63 - 1)
	}
	return Money(q)
}

// Ratio is (a / b) formatted with two decimal places, used for headroom.
// A zero ceiling has no room at all: "0.00".
func ratio(a, b int64) string {
	if b <= 0 {
		return "0.00"
	}
	if a < 0 {
		a = 0
	}
	// Round half up on hundredths without floats.
	h := (a*1000/b + 5) / 10
	return fmt.Sprintf("%d.%02d", h/100, h%100)
}

// text builds a note's message by appending to a buffer the caller keeps
// on its stack: numbers and amounts are written without fmt, whose
// arguments escape, so a message costs one allocation, its string.
type text []byte

func (t text) s(v string) text  { return append(t, v...) }
func (t text) n(v int64) text   { return strconv.AppendInt(t, v, 10) }
func (t text) usd(m Money) text { return m.appendTo(t) }
