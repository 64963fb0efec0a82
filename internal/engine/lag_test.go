package engine

import "testing"

// TestNoteEndOffsets: the lag is the end offset minus the committed
// position, the end offset the larger of the last fetch's high watermark
// and the end offsets handed to NoteEndOffsets (from any goroutine, also
// while a batch runs); unknown (-1) while not ready or with no end offset;
// partitions and topics not this coordinator's are ignored.
func TestNoteEndOffsets(t *testing.T) {
	c := &Coordinator{cfg: CoordinatorConfig{Topics: []string{"in", "in2"}}, clock: &manualClock{}}
	c.mu.slots = map[int32]*slot{}
	newSlot := func(p int32, ready bool, pos ...int64) *slot {
		s := &slot{part: p, ready: ready, lag: -1, position: pos,
			endOffset: minusOnes(2), fetchEnd: minusOnes(2), logStart: minusOnes(2)}
		c.mu.slots[p] = s
		return s
	}
	s0 := newSlot(0, true, 100, 10)
	s1 := newSlot(1, false, 5, 5)
	lag := func(p int32) int64 { return c.Snapshot().Status[p].Lag }

	c.NoteEndOffsets("in", map[int32]int64{0: 600, 1: 50, 7: 9})
	if got := lag(0); got != -1 {
		t.Fatalf("one input's end offset unknown: lag %d, want -1", got)
	}
	c.NoteEndOffsets("in2", map[int32]int64{0: 30})
	if got := lag(0); got != 500+20 {
		t.Fatalf("lag %d, want 520 (600-100 + 30-10)", got)
	}
	if got := lag(1); got != -1 {
		t.Fatalf("a partition not ready: lag %d, want -1", got)
	}
	c.NoteEndOffsets("other", map[int32]int64{0: 1})
	if got := lag(0); got != 520 {
		t.Fatalf("another topic's offsets changed the lag to %d", got)
	}

	// A newer fetch's high watermark counts until newer end offsets come.
	c.mu.Lock()
	s0.fetchEnd[0] = 700
	s0.lag = s0.computeLag()
	c.mu.Unlock()
	if got := lag(0); got != 620 {
		t.Fatalf("lag %d, want 620 (fetch 700-100 + 20)", got)
	}
	// A commit moves the position; the end offsets stay.
	c.mu.Lock()
	s0.position[0], s0.position[1] = 650, 30
	s0.lag = s0.computeLag()
	c.mu.Unlock()
	if got := lag(0); got != 50 {
		t.Fatalf("after a commit: lag %d, want 50", got)
	}
	c.NoteEndOffsets("in", map[int32]int64{0: 900})
	if got := lag(0); got != 250 {
		t.Fatalf("new end offsets: lag %d, want 250 (900-650)", got)
	}
	// Nothing committed: from the log start.
	s2 := newSlot(2, true, -1, -1)
	c.NoteEndOffsets("in", map[int32]int64{2: 40})
	c.NoteEndOffsets("in2", map[int32]int64{2: 40})
	if got := lag(2); got != -1 {
		t.Fatalf("no position and no log start: lag %d, want -1", got)
	}
	c.mu.Lock()
	s2.logStart[0], s2.logStart[1] = 10, 40
	s2.lag = s2.computeLag()
	c.mu.Unlock()
	if got := lag(2); got != 30 {
		t.Fatalf("from the log start: lag %d, want 30", got)
	}
	// The total waits for every ready partition's lag; s1 is not ready.
	if got := c.totalLag(); got != 250+30 {
		t.Fatalf("total lag %d, want 280", got)
	}
	c.mu.Lock()
	s1.ready = true
	s1.lag = s1.computeLag()
	c.mu.Unlock()
	if got := c.totalLag(); got != -1 {
		t.Fatalf("total lag %d with partition 1's unknown, want -1", got)
	}
}
