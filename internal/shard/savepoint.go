package shard

import (
	"slices"
	"unsafe"

	"github.com/kstate/kstate/state"
)

// Savepoints let the engine discard the writes of one grouping key's
// handler call without dropping the rest of the batch (a failing key whose
// rows go to a dead-letter topic; see Topology.OnProcessingError of package
// kstate).
//
// Design: while a savepoint may be rolled back to, every staged write
// appends an undo entry (the staged entry and what it held before, or that
// it was not staged at all). RollbackTo replays the undo log backwards: a
// previously staged entry gets its old value or tombstone back, a newly
// staged entry is unlinked from the skiplist and the index, so reads and
// Finish see exactly the staging of the savepoint. The batch's statistics
// are restored from the copy the savepoint holds. The timer and TTL floors
// are not restored: a rolled-back put may have lowered the batch's floor,
// which stays a true lower bound (it only makes the next scan start
// earlier). The undo log lives as long as the staging layer (Commit and
// Abort drop both); nothing is logged before the batch's first Savepoint.

// Savepoint marks a point of the batch in progress that RollbackTo can
// return to. It is only valid in the batch it was taken in.
type Savepoint struct {
	batch uint64
	undo  int
	stats Stats
}

// undoEntry is what a staged entry held before one write.
type undoEntry struct {
	e       *stagedEntry
	existed bool // false: the write inserted e
	val     []byte
	deleted bool
}

// Savepoint returns a savepoint of the batch in progress (before Finish).
func (s *Shard) Savepoint() (Savepoint, error) {
	if err := s.checkWrite("Savepoint"); err != nil {
		return Savepoint{}, err
	}
	s.stage.logUndo = true
	return Savepoint{batch: s.batchSeq, undo: len(s.stage.undo), stats: s.batchStats}, nil
}

// RollbackTo discards every write staged since sp was taken: reads,
// Finish's changelog records, Commit and the statistics no longer see
// them. Savepoints taken after sp become invalid; sp itself stays valid.
func (s *Shard) RollbackTo(sp Savepoint) error {
	if err := s.checkWrite("RollbackTo"); err != nil {
		return err
	}
	if sp.batch != s.batchSeq || sp.undo > len(s.stage.undo) {
		return shardErr("RollbackTo", state.ErrNoBatch)
	}
	s.stage.rollback(sp.undo)
	s.forgetTails()
	s.batchStats = sp.stats
	return nil
}

// rollback undoes the writes logged from undo position n on.
func (st *staging) rollback(n int) {
	for i := len(st.undo) - 1; i >= n; i-- {
		u := st.undo[i]
		if u.existed {
			u.e.val, u.e.deleted = u.val, u.deleted
			continue
		}
		st.unlink(u.e)
	}
	clear(st.undo[n:])
	st.undo = st.undo[:n]
}

// unlink removes e from the skiplist or its unit, and from the index.
// Only rollback calls it, between handler calls, so no walk of the layer
// is in progress.
func (st *staging) unlink(e *stagedEntry) {
	delete(st.index, string(e.key))
	st.allOK = false
	if n := unitLen(e.key); n > 0 {
		st.unlinkUnit(e, string(e.key[:n]))
		return
	}
	var prev [stagingMaxLevel]*stagedEntry
	st.findLT(e.key, &prev)
	for i := range e.next {
		if prev[i].next[i] == e {
			prev[i].next[i] = e.next[i]
		}
	}
}

// unlinkUnit removes the unit entry e from unit u's chain and from
// unitEntries (rolled back entries are recent: searched from the end).
func (st *staging) unlinkUnit(e *stagedEntry, u string) {
	delete(st.unitSorted, u)
	st.lastUnit, st.lastHead = "", nil
	if h := st.units[u]; h == e {
		delete(st.units, u)
		if nh := e.unitNext; nh != nil {
			// The next entry heads the chain; the map key must be a
			// string over its key bytes, which outlive this entry's.
			st.units[unsafe.String(&nh.key[0], len(u))] = nh
		}
	} else {
		for p := h; p != nil; p = p.unitNext {
			if p.unitNext == e {
				p.unitNext = e.unitNext
				break
			}
		}
	}
	e.unitNext = nil
	for i := len(st.unitEntries) - 1; i >= 0; i-- {
		if st.unitEntries[i] == e {
			st.unitEntries = slices.Delete(st.unitEntries, i, i+1)
			break
		}
	}
}
