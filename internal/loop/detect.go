package loop

import (
	"fmt"
	"strings"
)

// maxDepthEntries bounds State.Depth so a long run's state stays small.
const maxDepthEntries = 64

// detection is what the detector found for one proposed call.
type detection struct {
	period int
	sigs   []SigEntry
	count  int
}

func (d *detection) reason(cfg LoopDetection) string {
	if d.period <= 1 {
		return fmt.Sprintf("the same call %s was proposed %d times within the last %d calls (threshold %d); "+
			"the agent is repeating itself, usually because a tool returns something it cannot act on",
			d.sigs[0].Text, d.count, cfg.Window, cfg.Threshold)
	}
	names := make([]string, len(d.sigs))
	for i, s := range d.sigs {
		names[i] = s.Text
	}
	return fmt.Sprintf("a cycle of period %d repeats: %s; it reached depth %d (its calls proposed %d times within the last %d calls, threshold %d): "+
		"the agent is oscillating between calls without progress",
		d.period, strings.Join(names, " -> "), d.count, d.count, cfg.Window, cfg.Threshold)
}

// recordSignature adds one proposed signature to the window and reports a loop.
//
// The depth of a signature is how many times it was proposed within the
// last Window calls; the run stops when a signature reaches Threshold. An
// exact repeat reaches it on its Threshold-th proposal; a cycle of period
// p (A,B,A,B,... has period 2) when its first call comes round the
// Threshold-th time, after (Threshold-1)*p+1 calls. New refuses a window
// smaller than Threshold*MaxPeriod, so every cycle of period up to
// MaxPeriod is stopped at the same depth as an exact repeat. When the calls
// since the signature's first occurrence in the window form a cycle of
// period 2..MaxPeriod, the reason names the cycle and its period.
//
// The window keeps hashes only; the texts of the last MaxPeriod calls are
// kept apart (Named), which is all a reason needs: a cycle ends with the
// call just proposed, so its calls are the last ones.
func (s *State) recordSignature(cfg LoopDetection, e SigEntry) *detection {
	s.upgradeWindow()
	w := s.Window + e.Hash
	if n := len(w) / SigHashLen; n > cfg.Window {
		w = w[(n-cfg.Window)*SigHashLen:]
	}
	s.Window = w
	s.Named = append(s.Named, e)
	if keep := max(1, cfg.MaxPeriod); len(s.Named) > keep {
		s.Named = append(s.Named[:0], s.Named[len(s.Named)-keep:]...)
	}
	s.countDepth(e.Hash)

	first, count := -1, 0
	for i := 0; i < len(w); i += SigHashLen {
		if w[i:i+SigHashLen] == e.Hash {
			if first < 0 {
				first = i / SigHashLen
			}
			count++
		}
	}
	if count < cfg.Threshold {
		return nil
	}
	d := &detection{period: 1, sigs: []SigEntry{e}, count: count}
	if p := period(w[first*SigHashLen:], cfg.MaxPeriod); p >= 2 && p <= len(s.Named) {
		// The cycle as it first came: the call just proposed, then the
		// p-1 calls before it, oldest first.
		n := len(s.Named)
		d.period, d.sigs = p, append([]SigEntry{e}, s.Named[n-p:n-1]...)
	}
	return d
}

// upgradeWindow moves a window saved as full entries (Recent, by an older
// operator) into Window and Named, and shortens the older, longer hashes
// (of the same SHA-256) in it and in Depth, so that a run resumed across
// an upgrade keeps counting its repeats.
func (s *State) upgradeWindow() {
	if len(s.Recent) > 0 {
		var b strings.Builder
		for i := range s.Recent {
			s.Recent[i].Hash = shortHash(s.Recent[i].Hash)
			b.WriteString(s.Recent[i].Hash)
		}
		s.Window = b.String()
		s.Named = append([]SigEntry(nil), s.Recent[max(0, len(s.Recent)-maxNamed):]...)
		s.Recent = nil
	}
	for k, v := range s.Depth {
		if short := shortHash(k); short != k {
			delete(s.Depth, k)
			s.Depth[short] = max(s.Depth[short], v)
		}
	}
}

// maxNamed is the most Named entries an upgraded window keeps (the CRD's
// largest maxPeriod); the next observed call trims them to the run's.
const maxNamed = 10

// shortHash cuts a hash to SigHashLen characters (hashes of the same
// SHA-256, so a longer one's prefix is the short one), or pads a
// malformed one so that the window keeps its stride.
func shortHash(h string) string {
	if len(h) >= SigHashLen {
		return h[:SigHashLen]
	}
	return h + strings.Repeat("-", SigHashLen-len(h))
}

// checkWindow says why a loop detection configuration cannot stop a cycle
// of MaxPeriod calls at Threshold repetitions, or returns nil.
func (l LoopDetection) checkWindow() error {
	if need := l.Threshold * l.MaxPeriod; l.Window < need {
		return fmt.Errorf("loopDetection.window (%d) must be at least threshold x maxPeriod (%d x %d = %d), so that a cycle of "+
			"maxPeriod calls can repeat threshold times inside it; raise window, or leave it unset to get exactly that",
			l.Window, l.Threshold, l.MaxPeriod, need)
	}
	return nil
}

// period returns the smallest p in 1..maxPeriod for which the window w
// (hashes of SigHashLen characters) repeats with period p over its whole
// length (with at least two full periods and, for p >= 2, at least two
// distinct entries in a period), or 0.
func period(w string, maxPeriod int) int {
	const L = SigHashLen
	n := len(w) / L
	for p := 1; p <= maxPeriod && 2*p <= n; p++ {
		if w[p*L:] != w[:len(w)-p*L] {
			continue
		}
		if p == 1 {
			return 1
		}
		for i := 1; i < p; i++ {
			if w[i*L:(i+1)*L] != w[:L] {
				return p
			}
		}
	}
	return 0
}

// countDepth keeps the repeated-intent depth: the largest number of times
// one signature was proposed in the run. Counts live in a bounded map;
// when it is full, signatures seen only once are dropped first.
func (s *State) countDepth(hash string) {
	if s.Depth == nil {
		s.Depth = map[string]int{}
	}
	s.Depth[hash]++
	if c := s.Depth[hash]; c > s.MaxDepth {
		s.MaxDepth = c
	}
	if len(s.Depth) > maxDepthEntries {
		for k, v := range s.Depth {
			if v == 1 && k != hash {
				delete(s.Depth, k)
			}
		}
		for len(s.Depth) > maxDepthEntries { // all repeated: drop the smallest
			minK, minV := "", 0
			for k, v := range s.Depth {
				if k != hash && (minK == "" || v < minV) {
					minK, minV = k, v
				}
			}
			delete(s.Depth, minK)
		}
	}
}
