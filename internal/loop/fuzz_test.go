package loop

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math/big"
	"strings"
	"testing"
	"time"
)

// Seeds shared by the fuzz targets: the hostile inputs of issue 9 and the
// ordinary shapes of arguments.
var fuzzArgSeeds = []string{
	`{}`, ``, `{"id":1}`, `{"id":1.0,"x":[2,1]}`, `{"q":"a"}`, `{"q":"secret"}`,
	`{"b":1,"a":{"d":[1,2],"c":true}}`, `{"a":1.0,"b":1e3,"c":0.50,"d":-0,"e":2.5e-1}`,
	`{"note":"card 4111111111111111","request_id":"r1"}`,
	`{"html":"<script>alert(1)</script>","cmd":"ls && rm -rf /"}`,
	`{"s":"a\u0041\n\u003c\ud800"}`,
	`{"n":1e999999}`, `{"xs":[1e999999,1e999999,1E+999999,-0.1e-999999]}`, `{"n":1e1234567890123456789}`,
	`{"n":123456789012345678901234567890.5e-40}`, `{"n":0e99999999999999999999999}`,
	`[1,2]`, `"text"`, `null`, `{"a":`, `{"a":1} {"b":2}`, `not json`, `{"a":"\xff\xfe"}`,
}

func FuzzCanonical(f *testing.F) {
	for _, s := range fuzzArgSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, err := Canonical(in, []string{"request_id"})
		if err != nil {
			if json.Valid(in) && !errors.Is(err, errExponent) {
				t.Fatalf("valid JSON %q refused: %v", in, err)
			}
			return
		}
		if !json.Valid(out) {
			t.Fatalf("Canonical(%q) = %q is not JSON", in, out)
		}
		// The work and the output follow the input's size (a number
		// gains at most maxPlainZeros zeros; a byte at most 6 escaped).
		if len(out) > 8*len(in)+8 {
			t.Fatalf("Canonical(%q) is %d bytes long", in, len(out))
		}
		again, err := Canonical(out, nil)
		if err != nil || !bytes.Equal(again, out) {
			t.Fatalf("not a fixed point: %q -> %q -> %q (%v)", in, out, again, err)
		}
	})
}

// FuzzCanonicalNumber checks that normalising a number keeps its exact
// value, for numbers small enough to compare as rationals.
func FuzzCanonicalNumber(f *testing.F) {
	for _, s := range []string{"1", "1.0", "1e0", "10e-1", "-0", "0.50", "2.5e-1", "1e22", "123e40", "-1.5e-30", "0.00015e-30", "4.111111111111111e15", "1e-23"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, lit string) {
		var n json.Number
		if len(lit) > 60 || json.Unmarshal([]byte(lit), &n) != nil || strings.TrimSpace(lit) != lit {
			return
		}
		d, err := parseDecimal(lit)
		if err != nil {
			return // an exponent of more than 15 digits
		}
		if d.order() > 400 || d.order() < -400 {
			return // too large to compare as rationals cheaply
		}
		want, ok1 := new(big.Rat).SetString(lit)
		if !ok1 {
			return // big.Rat refuses the literal (0e<20 digits> is zero, and so normalised)
		}
		got, ok2 := new(big.Rat).SetString(d.String())
		if !ok2 || want.Cmp(got) != 0 {
			t.Fatalf("%s normalised to %s, a different number", lit, d.String())
		}
	})
}

func hasRepeatedKey(raw []byte) bool {
	_, ok := repeatedKey(raw)
	return ok
}

func FuzzDecodeArgs(f *testing.F) {
	for _, s := range fuzzArgSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		d := decodeArgs(raw, []string{"request_id"})
		// The allocation-free count finds a repeated key exactly when the
		// token-by-token scan does.
		if v, err := decodeJSON(raw); err == nil {
			if fast, slow := keysWritten(raw) != keysKept(v), hasRepeatedKey(raw); fast != slow {
				t.Fatalf("%q: the key count says repeated=%v, the scan %v", raw, fast, slow)
			}
		}
		if d.err == nil {
			if _, ok := d.value.(map[string]any); !ok {
				t.Fatalf("decodeArgs(%q) accepted a %T", raw, d.value)
			}
			if !json.Valid(d.full) || !json.Valid(d.canon) {
				t.Fatalf("decodeArgs(%q): canonical forms are not JSON: %q, %q", raw, d.full, d.canon)
			}
			// Every argument is in the form guardrails see.
			// Numbers as written: the engine accepts some (1e700) that
			// do not fit a float64.
			var back map[string]any
			dec := json.NewDecoder(bytes.NewReader(d.full))
			dec.UseNumber()
			if err := dec.Decode(&back); err != nil || len(back) != len(d.value.(map[string]any)) {
				t.Fatalf("decodeArgs(%q): the full form %q does not hold every argument (%v)", raw, d.full, err)
			}
			celValue(d.value)
		} else if d.value != nil {
			t.Fatalf("decodeArgs(%q) returned a value with error %v", raw, d.err)
		}
	})
}

// fuzzBytes hands out the fuzzer's bytes one decision at a time; zero
// once they run out, so every run ends.
type fuzzBytes struct{ b []byte }

func (r *fuzzBytes) next() int {
	if len(r.b) == 0 {
		return 0
	}
	c := r.b[0]
	r.b = r.b[1:]
	return int(c)
}

func (r *fuzzBytes) chunk(n int) []byte {
	n = min(n, len(r.b))
	c := r.b[:n]
	r.b = r.b[n:]
	return c
}

func fuzzConfig() Config {
	return Config{
		Goal:   "Explain the double charge.",
		Budget: Budget{MaxTurns: 6, MaxTokens: 300_000, MaxCost: new(MustMoney("1")), MaxToolCalls: new(8), DefaultToolLimit: new(4), PerTool: map[string]int{"refund": 1}},
		Model:  ModelConfig{MaxOutputTokens: 1000, Pricing: Pricing{Input: MustMoney("3"), Output: MustMoney("15")}},
		Loop:   LoopDetection{IgnoreArguments: []string{"request_id"}},
		Tools: []ToolSpec{
			{Name: "lookup", Parameters: json.RawMessage(`{"type":"object","properties":{"id":{"type":"integer","minimum":0}}}`), MaxCost: MustMoney("0.01")},
			{Name: "search", Parameters: json.RawMessage(`{"type":"object","properties":{"q":{"type":"string"}}}`)},
			{Name: "note", Mutates: true, Reversible: true},
			{Name: "refund", Mutates: true, MaxCost: MustMoney("0.02")},
		},
		Policy: Policy{Default: Allow, Rules: []Rule{
			{Tools: []string{"search"}, When: "has(args.q) && args.q == 'secret'", Decision: Deny, Reason: "not that"},
			{Tools: []string{"lookup"}, When: "args.id > 5", Decision: Ask},
		}},
		Guardrails: []Guardrail{
			{Name: "cards", Tools: []string{"*"}, Pattern: `\b\d{13,19}\b`, Severity: Halt},
			{Name: "scripts", Tools: []string{"*"}, Pattern: `<script>`, Severity: Block},
		},
		ApprovalTimeout: time.Minute,
	}
}

// FuzzStep drives the engine over replies, answers and results made from
// the fuzzer's bytes: it must never panic, the hard ceilings must hold
// after every step, and every proposed call must get exactly one
// observation (the last turn of a finished run may end before any).
func FuzzStep(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{4, 2, 0, 3, 10, 1, 5, 9, 9, 9, 4, 1, 1, 0})
	f.Add([]byte("\x05\x03\x00\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f"))
	f.Add([]byte("\x09\x01\x0f\x04\x07\x01\x0f\x04\x07\x01\x0f\x04\x07\x01\x0f\x04\x07\x01\x0f\x04\x07"))
	f.Add(bytes.Repeat([]byte{7, 7, 2, 3, 11, 0, 1}, 20))
	cfg := fuzzConfig()
	names := []string{"lookup", "search", "note", "refund", "missing", EscalateTool}
	f.Fuzz(func(t *testing.T, data []byte) {
		clock := newClock()
		e, err := New(cfg, WithClock(clock.Now))
		if err != nil {
			t.Fatal(err)
		}
		r := &fuzzBytes{b: data}
		s := &State{}
		in := Input{}
		for step := 0; step < 400; step++ {
			eff := e.Step(s, in)
			in = Input{}
			checkCeilings(t, e, s)
			checkObservations(t, s)
			switch eff.Kind {
			case EffectFinish:
				if !s.Done() || s.Reason == "" {
					t.Fatalf("finished without an outcome and a reason: %+v", s)
				}
				return
			case EffectCallModel:
				switch r.next() % 16 {
				case 0:
					in.ModelErr = errors.New("HTTP 500")
				case 1: // the reply was lost
				default:
					in.Reply = fuzzReply(r, s.Reserved, names)
				}
			case EffectAsk:
				in.Answers = map[string]Answer{}
				for _, c := range eff.Pending {
					if a := r.next() % 5; a < 3 {
						in.Answers[c.ID] = []Answer{Approve, DenyAnswer, Stop}[a]
					}
				}
				if len(in.Answers) == 0 {
					clock.Advance(2 * time.Minute) // nobody answers: the ask times out
				}
			case EffectRunTools:
				for _, c := range s.Calls {
					if c.State != CallDispatched || r.next()%10 == 9 {
						continue // this result is lost
					}
					res := Result{CallID: c.ID, Output: r.chunk(r.next() % 32)}
					if r.next()%4 == 0 {
						res.Failure = &Failure{Kind: FailHTTP, Code: 503}
					}
					in.Results = append(in.Results, res)
				}
			case EffectWait:
				clock.Advance(eff.Until.Sub(clock.Now())) // a retry's backoff
			}
			if r.next()%64 == 63 {
				in.Cancel = true
			}
		}
		t.Fatalf("the run did not end within 400 steps: phase %s turn %d", s.Phase, s.Turn)
	})
}

func fuzzReply(r *fuzzBytes, reserved Usage, names []string) *Reply {
	rep := &Reply{Usage: TokenUsage{
		InputTokens:  min(reserved.InputTokens, int64(r.next())*200),
		OutputTokens: min(reserved.OutputTokens, int64(r.next())*4),
	}}
	switch r.next() % 10 {
	case 0:
		rep.Refusal = "I will not."
	case 1:
		rep.Content, rep.Truncated = "cut", true
	case 2:
		rep.Content = "The customer was charged twice."
	case 3: // empty
	default:
		for range 1 + r.next()%4 {
			var args []byte
			if k := r.next() % (len(fuzzArgSeeds) + 1); k < len(fuzzArgSeeds) {
				args = []byte(fuzzArgSeeds[k])
			} else {
				args = r.chunk(r.next() % 48)
			}
			rep.ToolCalls = append(rep.ToolCalls, ToolCall{Name: names[r.next()%len(names)], Arguments: args})
		}
	}
	return rep
}

func checkCeilings(t *testing.T, e *Engine, s *State) {
	t.Helper()
	b := &e.cfg.Budget
	u := s.Usage
	var errs []string
	if u.Turns > b.MaxTurns {
		errs = append(errs, fmt.Sprintf("turns %d > %d", u.Turns, b.MaxTurns))
	}
	if u.Tokens() > b.MaxTokens {
		errs = append(errs, fmt.Sprintf("tokens %d > %d", u.Tokens(), b.MaxTokens))
	}
	if u.Cost > b.costCeiling() {
		errs = append(errs, fmt.Sprintf("cost %s > %s", u.Cost, b.costCeiling()))
	}
	if u.ToolCalls > b.toolCallsCeiling() {
		errs = append(errs, fmt.Sprintf("tool calls %d > %d", u.ToolCalls, b.toolCallsCeiling()))
	}
	for name, n := range u.PerTool {
		if limit := b.toolLimit(name); n > limit {
			errs = append(errs, fmt.Sprintf("%s calls %d > %d", name, n, limit))
		}
	}
	if len(errs) > 0 {
		t.Fatalf("a hard ceiling was passed: %s (outcome %s: %s)", strings.Join(errs, "; "), s.Outcome, s.Reason)
	}
}

// checkObservations checks the transcript: each proposed call is answered
// by exactly one tool message of its turn, except in the last proposing
// turn, which may still be in progress or may have ended the run first
// (then at most one).
func checkObservations(t *testing.T, s *State) {
	t.Helper()
	lastProposal := -1
	for i, m := range s.Transcript {
		if m.Role == RoleAssistant && len(m.ToolCalls) > 0 {
			lastProposal = i
		}
	}
	for i, m := range s.Transcript {
		if m.Role != RoleAssistant || len(m.ToolCalls) == 0 {
			continue
		}
		seen := map[string]int{}
		for _, c := range m.ToolCalls {
			seen[c.ID] = 0
		}
		for _, o := range s.Transcript[i+1:] {
			if o.Role != RoleTool {
				break
			}
			if _, ok := seen[o.CallID]; !ok {
				t.Fatalf("tool message for %q, which turn %d did not propose", o.CallID, m.Turn)
			}
			seen[o.CallID]++
		}
		for id, n := range seen {
			if n > 1 || (n == 0 && i != lastProposal) {
				t.Fatalf("call %s has %d observations", id, n)
			}
		}
		if i == lastProposal && !s.Done() && s.Phase == PhaseAdmit {
			for id, n := range seen {
				if n != 1 {
					t.Fatalf("call %s has %d observations after its turn ended", id, n)
				}
			}
		}
	}
}
