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
	return fmt.Sprintf("a cycle of period %d repeats: %s; the agent is oscillating between calls without progress",
		d.period, strings.Join(names, " -> "))
}

// observe adds one proposed signature to the window and reports a loop.
//
// The rules, checked after each proposed call:
//   - repeat: the signature occurs Threshold times within the last Window
//     proposed calls. When the calls since its first occurrence in the
//     window form a cycle of period 2..MaxPeriod, the reason names the
//     cycle and its period rather than the single call.
//   - cycle: the last Window calls are one block of 2..MaxPeriod calls
//     repeated (at least twice), with at least two distinct calls in it.
//     This catches cycles whose period is too long for a repeat to reach
//     the threshold inside the window.
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
	if count >= cfg.Threshold {
		d := &detection{period: 1, sigs: []SigEntry{e}, count: count}
		if p := period(s.Recent[first:], cfg.MaxPeriod); p >= 2 {
			d.period, d.sigs = p, s.Recent[first:first+p]
		}
		return d
	}
	if len(s.Recent) == window {
		if p := period(s.Recent, cfg.MaxPeriod); p >= 2 && 2*p <= window {
			return &detection{period: p, sigs: s.Recent[len(s.Recent)-p:]}
		}
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
