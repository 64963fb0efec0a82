package engine

import (
	"runtime"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstate/kstate/processor"
)

// TestBatchKeepsNoRecordBytes: once a batch is committed, the task keeps
// no reference to its records' bytes. A polled record's key and value are
// slices of the fetch response it came with (franz-go decodes in place),
// so one key kept by a task until its partition's next batch kept a whole
// response alive: 17 responses of 4 MiB at 64 partitions
// (docs/BENCHMARKS.md, "Session 41: 64 partitions, the fetch responses
// tasks kept").
func TestBatchKeepsNoRecordBytes(t *testing.T) {
	h := &harness[string, string, string]{t: t, cfg: strCfg(counter, processor.NoTime)}
	h.mustOpen("")
	var freed atomic.Bool
	func() {
		// One buffer for all records, as a fetch response is.
		body := make([]byte, 4096)
		runtime.SetFinalizer(&body[0], func(*byte) { freed.Store(true) })
		slice := func(off int, s string) []byte { return body[off : off+copy(body[off:], s) : off+len(s)] }
		recs := []Record{
			{Offset: 0, Key: slice(0, "a"), Value: slice(10, "x")},
			{Offset: 1, Key: slice(20, "b"), Value: slice(30, "y")},
			{Offset: 2, Key: slice(40, "a"), Value: slice(50, "z")},
		}
		h.offset = 3
		equal(t, "batch", h.run(0, recs...), []string{"a=2:x,z", "b=1:y"})
	}()
	for deadline := time.Now().Add(5 * time.Second); !freed.Load(); {
		if time.Now().After(deadline) {
			t.Fatal("the batch's record bytes are still referenced after its commit")
		}
		runtime.GC()
		time.Sleep(time.Millisecond)
	}
	// The task goes on with the next batch as before.
	equal(t, "next batch", h.run(0, h.rec("a", "w", 0)), []string{"a=3:x,z,w"})
}
