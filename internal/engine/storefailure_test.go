package engine

import (
	"errors"
	"iter"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
)

// failingStore is a memory store whose point reads fail with failWith
// while it is set.
type failingStore struct {
	kv.Store
	failWith atomic.Pointer[error]
}

func (s *failingStore) Get(key []byte) ([]byte, bool, error) {
	if err := s.failWith.Load(); err != nil {
		return nil, false, *err
	}
	return s.Store.Get(key)
}

// TestStoreFailureNotDeadLettered: under OnProcessingError DeadLetter a
// handler that fails because the state store failed (an I/O error of the
// disk, damaged files, a closed store) must not send the key's rows to the
// dead-letter topic: that would take them out of the output for a fault
// of the machine, and the batch would commit without them. The batch fails
// instead (nothing of it is committed; the rows are processed again after
// the restart). A handler's own error is still dead-lettered.
func TestStoreFailureNotDeadLettered(t *testing.T) {
	storeErrs := []error{
		errors.New("IO error: While pread offset 0 len 4096: /state/0/rocksdb/000012.sst: Input/output error"),
		errors.New("Corruption: block checksum mismatch: stored = 1, computed = 2 in /state/0/rocksdb/000012.sst offset 0 size 4096"),
		kv.ErrClosed,
	}
	for _, storeErr := range storeErrs {
		t.Run(strings.Fields(storeErr.Error())[0], func(t *testing.T) {
			cfg := strCfg(counter, processor.NoTime)
			cfg.OnProcessingError = PolicyDeadLetter
			store := &failingStore{Store: kv.NewMemory()}
			cfg.Backend = store
			h := &harness[string, string, string]{t: t, cfg: cfg}
			task, err := Open(cfg)
			if err != nil {
				t.Fatal(err)
			}
			defer task.Close()
			if err := task.Start(); err != nil {
				t.Fatal(err)
			}
			h.task = task
			equal(t, "outputs", h.run(0, h.rec("a", "x", 0)), []string{"a=1:x"})

			store.failWith.Store(&storeErr)
			res, err := task.RunBatch(0, []Record{h.rec("a", "y", 0), h.rec("b", "y", 0)})
			if err == nil {
				t.Fatalf("the batch succeeded with %d dead letters and outputs %v; want it failed by the store's error", len(res.DeadLetters), outs(res))
			}
			if !errors.Is(err, storeErr) {
				t.Fatalf("batch error %v; want it to wrap %v", err, storeErr)
			}
			task.Abort()
			store.failWith.Store(nil)
			equal(t, "outputs after the store is back", h.run(0, h.rec("a", "y", 0)), []string{"a=2:x,y"})
			if c := task.Counters(); c.DeadLettered != 0 {
				t.Fatalf("%d rows dead-lettered for a store failure", c.DeadLettered)
			}
		})
	}
	// The handler's own error is still the key's.
	cfg := strCfg(func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{input: func(_ processor.Handle, key string, _ iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
			if key == "bad" {
				return errors.New("bad key")
			}
			return out.Emit("ok")
		}}
	}, processor.NoTime)
	cfg.OnProcessingError = PolicyDeadLetter
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	res, err := h.task.RunBatch(0, []Record{h.rec("bad", "1", 0), h.rec("good", "2", 0)})
	if err != nil || len(res.DeadLetters) != 1 || len(res.Outputs) != 1 {
		t.Fatalf("a handler's own error: err %v, %d dead letters, %d outputs; want nil, 1, 1", err, len(res.DeadLetters), len(res.Outputs))
	}
}
