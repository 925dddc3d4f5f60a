package loop

// Near repeats: a model that rewords its call on every retry (another
// phrasing of the query, an irrelevant argument changed each time) is
// repeating one intent, not exploring (seed 000, loop detection). The
// exact detector (detect.go) sees each rewording as a new signature, so
// such a run goes on until a per-tool limit ends it BudgetExhausted,
// blaming capacity for a stuck run. With LoopDetection.Similarity set, a
// call whose arguments are at least that similar to an earlier call of the
// same tool within the window counts as a repeat of it.
//
// Similarity is the Jaccard index of the multisets of character trigrams
// of the two calls' canonical arguments after normalisation: letters lowercased, and
// every run of characters that are neither letters nor digits (JSON's
// punctuation, spaces) folded into one space, so that "Checkout  errors?"
// and "checkout errors" are the same text. Digits are kept: looking up
// order A-17 and then A-18 is progress. The detector is off unless a run
// sets a similarity, because pagination and similar lookups of different
// things look alike to it; 0.9 flags no sample that completes (see the
// localrun test that runs them with it).

import (
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"unicode"
)

// maxNearText bounds the normalised text kept per call in State.Near.
const maxNearText = 512

// nearText normalises a call's canonical arguments for comparison.
func nearText(canon []byte) string {
	var b strings.Builder
	space := false
	for _, r := range string(canon) {
		if unicode.IsLetter(r) || unicode.IsDigit(r) {
			if space && b.Len() > 0 {
				b.WriteByte(' ')
			}
			space = false
			b.WriteRune(unicode.ToLower(r))
			if b.Len() >= maxNearText {
				break
			}
			continue
		}
		space = true
	}
	return b.String()
}

// trigrams is the multiset of a text's character trigrams, as sorted
// hashes (a gram that occurs twice is there twice, so that "n 111" and
// "n 1111" differ). A text shorter than three bytes is its own single gram.
func trigrams(s string) []uint32 {
	if len(s) < 3 {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s))
		return []uint32{h.Sum32()}
	}
	out := make([]uint32, 0, len(s)-2)
	for i := 0; i+3 <= len(s); i++ {
		h := fnv.New32a()
		_, _ = h.Write([]byte(s[i : i+3]))
		out = append(out, h.Sum32())
	}
	slices.Sort(out)
	return out
}

// similarity is the Jaccard index of two sorted multisets: what they share
// (each element as often as it is in both) over what either holds.
func similarity(a, b []uint32) float64 {
	inter, i, j := 0, 0, 0
	for i < len(a) && j < len(b) {
		switch {
		case a[i] == b[j]:
			inter++
			i++
			j++
		case a[i] < b[j]:
			i++
		default:
			j++
		}
	}
	union := len(a) + len(b) - inter
	if union == 0 {
		return 1
	}
	return float64(inter) / float64(union)
}

// recordNear adds a proposed call to the near-repeat window and returns
// the reason the run stops when the call and the earlier calls of the same
// tool within the window that are at least Similarity alike to it reach
// Threshold together; "" otherwise, and always when the detector is off.
func (s *State) recordNear(cfg LoopDetection, tool string, canon []byte) string {
	if cfg.Similarity <= 0 {
		return ""
	}
	text := nearText(canon)
	grams := trigrams(text)
	alike, least := 1, 1.0
	for _, e := range s.Near {
		if e.Tool != tool {
			continue
		}
		if sim := similarity(grams, trigrams(e.Text)); sim >= cfg.Similarity {
			alike++
			least = min(least, sim)
		}
	}
	s.Near = append(s.Near, NearEntry{Tool: tool, Text: text})
	if n := len(s.Near) - cfg.Window; n > 0 {
		s.Near = append(s.Near[:0], s.Near[n:]...)
	}
	if alike < cfg.Threshold {
		return ""
	}
	return fmt.Sprintf("%d calls of %s within the last %d calls repeat one intent with reworded arguments "+
		"(each at least %.0f%% alike to the newest, %s; similarity threshold %.2f, threshold %d): "+
		"the agent is retrying the same thing in another form, usually because the tool's answer does not tell it what to change",
		alike, tool, cfg.Window, 100*least, cut(text, 120), cfg.Similarity, cfg.Threshold)
}
