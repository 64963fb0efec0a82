package engine

import (
	"fmt"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
)

// TestCountersStateDeletesSkipped: the deleted entries a batch's scans step
// over reach Counters.StateDeletesSkipped (kstate_state_deletes_skipped_total).
// 1,000 timers registered then deleted lie in the range the next firing
// scans (from the live timer at the floor up to now), so that batch steps
// over all of them in the store.
func TestCountersStateDeletesSkipped(t *testing.T) {
	if !kv.RocksDBAvailable {
		t.Skip("RocksDB is not compiled in")
	}
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, nil), processor.ProcessingTime)}
	h.mustOpen(t.TempDir())
	const n = 1000
	var reg, del []Record
	for i := range n {
		k := fmt.Sprintf("k%04d", i)
		reg = append(reg, h.rec(k, fmt.Sprintf("r%d", 2000+i), 0))
	}
	reg = append(reg, h.rec("a", "r1000", 0))
	h.run(500, reg...)
	if c := h.task.Counters(); c.StateDeletesSkipped != 0 {
		t.Fatalf("StateDeletesSkipped = %d before any deletion", c.StateDeletesSkipped)
	}
	for i := range n {
		k := fmt.Sprintf("k%04d", i)
		del = append(del, h.rec(k, fmt.Sprintf("d%d", 2000+i), 0))
	}
	h.run(500, del...)
	h.run(3500)
	equal(t, "fired", fired, []string{"a@1000"})
	if c := h.task.Counters(); c.StateDeletesSkipped < n {
		t.Fatalf("StateDeletesSkipped = %d after %d deleted timers were stepped over, want at least %d", c.StateDeletesSkipped, n, n)
	}
}
