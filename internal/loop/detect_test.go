package loop

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
)

// Issue 13, item 7: a window of 1,000 calls is checkpointed in status on
// every write; it must stay a small part of a 32 KiB object whatever the
// calls' arguments.
func TestLoop_aWindowOfAThousandCallsStaysSmall(t *testing.T) {
	cfg := LoopDetection{Threshold: 3, Window: 1000, MaxPeriod: 10}
	s := &State{}
	long := strings.Repeat("a long argument value ", 20)
	for i := range 1500 {
		raw := json.RawMessage(fmt.Sprintf(`{"q":%q,"n":%d}`, long, i))
		c, _ := Canonical(raw, nil)
		if d := s.recordSignature(cfg, sigEntry(signature("lookup", c, raw))); d != nil {
			t.Fatalf("call %d: distinct calls detected as a loop: %s", i, d.reason(cfg))
		}
	}
	raw, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if len(raw) > 16<<10 {
		t.Fatalf("the state of a run with a window of 1,000 calls takes %d bytes, want at most 16 KiB", len(raw))
	}
	// The window still holds 1,000 calls: a call made 990 calls ago and
	// proposed twice more is a loop; one made 1,001 calls ago is not in it.
	again := func(i int) *detection {
		raw := json.RawMessage(fmt.Sprintf(`{"q":%q,"n":%d}`, long, i))
		c, _ := Canonical(raw, nil)
		return s.recordSignature(cfg, sigEntry(signature("lookup", c, raw)))
	}
	if d := again(510); d != nil {
		t.Fatalf("a call 990 calls back counted as a repeat too early: %s", d.reason(cfg))
	}
	if d := again(510); d == nil || d.count != 3 || !strings.Contains(d.reason(cfg), "lookup{") {
		t.Fatalf("the third proposal of a call inside the window: %+v", d)
	}
	if d := again(499); d != nil && d.count > 1 {
		t.Fatalf("a call that left the window was counted: %d", d.count)
	}
}

// The cycle a reason names starts with the call just proposed and goes on
// in the order the calls came.
func TestLoop_aCycleIsNamedInOrder(t *testing.T) {
	cfg := LoopDetection{Threshold: 3, Window: 9, MaxPeriod: 3}
	s := &State{}
	var d *detection
	for _, n := range []string{"x", "a", "b", "c", "a", "b", "c", "a"} {
		d = s.recordSignature(cfg, sigEntry(signature(n, []byte(`{}`), nil)))
	}
	if d == nil || d.period != 3 || !strings.Contains(d.reason(cfg), "a{} -> b{} -> c{}") {
		t.Fatalf("detection = %+v", d)
	}
}

// A run checkpointed by an operator that saved the window as full entries
// with 16-digit hashes keeps counting its repeats after an upgrade.
func TestLoop_resumesAWindowSavedByAnOlderOperator(t *testing.T) {
	h := sha256.Sum256([]byte("a{}"))
	old := hex.EncodeToString(h[:8])
	other := sha256.Sum256([]byte("b{}"))
	saved := fmt.Sprintf(`{"turn":3,"usage":{},"reserved":{},"recent":[{"h":%q,"t":"a{}"},{"h":%q,"t":"b{}"},{"h":%q,"t":"a{}"}],`+
		`"depth":{%q:2},"maxDepth":2}`, old, hex.EncodeToString(other[:8]), old, old)
	s := &State{}
	if err := json.Unmarshal([]byte(saved), s); err != nil {
		t.Fatal(err)
	}
	cfg := LoopDetection{Threshold: 3, Window: 9, MaxPeriod: 3}
	d := s.recordSignature(cfg, sigEntry(signature("a", []byte(`{}`), nil)))
	if d == nil || d.count != 3 || s.MaxDepth != 3 {
		t.Fatalf("the third a after the upgrade: detection %+v, depth %d", d, s.MaxDepth)
	}
	if len(s.Recent) != 0 || len(s.Window) != 4*SigHashLen || len(s.Depth) != 1 {
		t.Fatalf("the old window was not moved: recent %v, window %q, depth %v", s.Recent, s.Window, s.Depth)
	}
}
