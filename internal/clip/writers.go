package clip

// HeadWriter keeps the first Limit bytes written to it and counts them
// all: a process's standard output, of which a result keeps the head.
type HeadWriter struct {
	Limit int
	buf   []byte
	size  int64
}

func (h *HeadWriter) Write(p []byte) (int, error) {
	h.size += int64(len(p))
	if room := h.Limit - len(h.buf); room > 0 {
		h.buf = append(h.buf, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

// Bytes is the head kept.
func (h *HeadWriter) Bytes() []byte { return h.buf }

// Size is how many bytes were written in all.
func (h *HeadWriter) Size() int64 { return h.size }

// TailWriter keeps the last Limit bytes written to it: a process's
// standard error, whose end says the most.
type TailWriter struct {
	Limit   int
	buf     []byte
	dropped bool
}

func (t *TailWriter) Write(p []byte) (int, error) {
	n := len(p)
	t.dropped = t.dropped || len(t.buf)+len(p) > t.Limit
	if len(p) >= t.Limit {
		t.buf = append(t.buf[:0], p[len(p)-t.Limit:]...)
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.Limit; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// Bytes is the tail kept, as written (it may start inside a rune).
func (t *TailWriter) Bytes() []byte { return t.buf }

// Dropped reports whether earlier bytes were written and let go.
func (t *TailWriter) Dropped() bool { return t.dropped }

// String is the tail kept, starting on a rune boundary.
func (t *TailWriter) String() string { return Tail(string(t.buf), len(t.buf)) }
