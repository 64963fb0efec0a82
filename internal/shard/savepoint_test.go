package shard_test

import (
	"errors"
	"testing"

	"github.com/kstate/kstate/changelog"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// TestSavepointRollback checks what the model test does not: the batch's
// statistics and changelog records forget rolled-back writes, reads inside
// the batch stop seeing them, and savepoints are bound to their batch.
func TestSavepointRollback(t *testing.T) {
	s := openMem(t, false)
	var v state.ValueState[int64]
	declare(t, s, func() { v = must[state.ValueState[int64]](t)(shard.NewValueState(s, "v", state.Int64())) })

	s.Begin(-1)
	s.SetCurrentKey([]byte("good"))
	noErr(t, v.Update(1))
	sp := must[shard.Savepoint](t)(s.Savepoint())
	s.SetCurrentKey([]byte("bad"))
	noErr(t, v.Update(2))
	s.SetCurrentKey([]byte("good"))
	noErr(t, v.Update(3)) // overwrites a write from before the savepoint
	noErr(t, s.RollbackTo(sp))
	if got, ok, _ := v.Get(); !ok || got != 1 {
		t.Fatalf("good after rollback = %d, %v; want 1", got, ok)
	}
	s.SetCurrentKey([]byte("bad"))
	if got, ok, _ := v.Get(); ok {
		t.Fatalf("bad after rollback = %d; want absent", got)
	}
	recs := must[[]changelog.Record](t)(s.Finish())
	stateRecs := 0
	for _, r := range recs {
		if r.Key[0] == 0x01 {
			stateRecs++
		}
	}
	if stateRecs != 1 {
		t.Fatalf("changelog has %d state records, want 1 (good=1): %v", stateRecs, recs)
	}
	noErr(t, s.Commit(int64(len(recs))))
	if st := s.Stats(); st.RowsUpdated != 1 {
		t.Fatalf("RowsUpdated = %d, want 1 (rolled-back writes are not counted)", st.RowsUpdated)
	}

	// A savepoint of another batch is rejected.
	s.Begin(-1)
	if err := s.RollbackTo(sp); !errors.Is(err, state.ErrNoBatch) {
		t.Fatalf("RollbackTo of an old batch's savepoint = %v, want ErrNoBatch", err)
	}
	s.Abort()
	if _, err := s.Savepoint(); !errors.Is(err, state.ErrNoBatch) {
		t.Fatalf("Savepoint outside a batch = %v, want ErrNoBatch", err)
	}
}
