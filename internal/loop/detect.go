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

// observe adds one proposed signature to the window and reports a loop.
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
func (s *State) observeSignature(cfg LoopDetection, e SigEntry) *detection {
	window := cfg.Window
	s.Recent = append(s.Recent, e)
	if len(s.Recent) > window {
		s.Recent = append(s.Recent[:0], s.Recent[len(s.Recent)-window:]...)
	}
	s.countDepth(e.Hash)

	first, count := -1, 0
	for i, r := range s.Recent {
		if r.Hash == e.Hash {
			if first < 0 {
				first = i
			}
			count++
		}
	}
	if count < cfg.Threshold {
		return nil
	}
	d := &detection{period: 1, sigs: []SigEntry{e}, count: count}
	if p := period(s.Recent[first:], cfg.MaxPeriod); p >= 2 {
		d.period, d.sigs = p, s.Recent[first:first+p]
	}
	return d
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

// period returns the smallest p in 1..maxPeriod for which seq repeats with
// period p over its whole length (with at least two full periods and, for
// p >= 2, at least two distinct entries in a period), or 0.
func period(seq []SigEntry, maxPeriod int) int {
	for p := 1; p <= maxPeriod && 2*p <= len(seq); p++ {
		ok := true
		for i := p; i < len(seq); i++ {
			if seq[i].Hash != seq[i-p].Hash {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		if p == 1 {
			return 1
		}
		distinct := false
		for i := 1; i < p; i++ {
			if seq[i].Hash != seq[0].Hash {
				distinct = true
			}
		}
		if distinct {
			return p
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
