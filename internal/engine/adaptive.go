package engine

import "time"

// batchSizer chooses the record limit of the loop's next poll (adaptive
// batches, issue #13). A fixed sizer (cap <= base) always returns base.
// An adaptive one starts at base and, after every batch, looks at the
// consumer lag left behind it (records in the input beyond what the batch
// consumed) and at what the batch's transaction cost:
//
//   - caught up (a lag below base; or, with the lag unknown, a poll of
//     less than half the limit): back to base at once with a known lag
//     (small batches keep latency low), halving toward it otherwise;
//   - a backlog (a lag of at least twice the limit, or, unknown, a full
//     poll) whose batch was short (at most slow) and spent at least a
//     tenth of its time in the fixed per-transaction cost (waiting for
//     the produce acknowledgements after the tasks, and End): the limit
//     doubles, up to cap. Larger batches spread that fixed cost over more
//     records (doubling saves half of its share); once it is a small
//     share, growing only lengthens batches (the output's visibility
//     waits for the commit);
//   - a batch longer than twice slow halves the limit (a heavy processor
//     does not grow its batches into long ones, which near
//     MaxBatchDuration);
//   - a batch whose changelog weighed more than adaptiveMaxStaged halves
//     the limit, and one weighing more than half of it does not double
//     it: a processor that writes many state entries per row keeps small
//     batches, since a batch's staged state, its changelog records and
//     their produce buffers are most of the process's Go heap, which the
//     garbage collector lets grow to twice its live size. The heavy
//     benchmark (about 7 changelog records a row) went from 906–942 MB
//     of peak RSS with batches grown to 20000 records to 647–669 MB at
//     5000, for 7–8 % of its rate (more transactions, each waiting for
//     its produce tail and End; docs/BENCHMARKS.md, "Batches bounded by
//     their changelog");
//   - otherwise the limit holds.
//
// Batch size does not change the protocol: each batch is one transaction
// whatever its size. Not safe for concurrent use: the loop goroutine owns
// it.
type batchSizer struct {
	base, cap int
	slow      time.Duration
	maxStaged int64
	limit     int
}

// batchObs is what the loop measured of one poll and its batch.
type batchObs struct {
	n    int           // records the poll returned
	took time.Duration // poll return to the end of the batch (local commits included)
	txn  time.Duration // the fixed per-transaction part of took: produce tail and End
	lag  int64         // input records beyond the batch on the assigned partitions; -1 unknown
	// staged is the weight of the batch's changelog (stagedWeight).
	staged int64
}

// Growth bound of an adaptive sizer: a batch that took longer than this
// (measured on the coordinator's Clock, poll return to commit) stops the
// growth; MaxBatchDuration/4 when that is shorter.
const adaptiveSlowBatch = time.Second

// adaptiveMaxStaged bounds the changelog weight (stagedWeight) of the
// batches an adaptive sizer grows to. The count benchmark's largest batches
// (20000 records, one small changelog record each) weigh about 4 MiB, and
// those of 200-byte values about 8 MiB: both still reach the cap. The
// heavy benchmark's weigh about 7 MiB at 5000 records.
const adaptiveMaxStaged = 12 << 20

// stagedRecordCost is what stagedWeight charges a changelog record beyond
// its key and value bytes: about the Go heap a staged entry, its changelog
// record and its produce buffer take besides the bytes.
const stagedRecordCost = 160

// stagedWeight is the weight of a batch's changelog of records records
// holding bytes key and value bytes.
func stagedWeight(records int, bytes int64) int64 {
	return bytes + int64(records)*stagedRecordCost
}

func newBatchSizer(base, cap int, maxBatchDuration time.Duration) *batchSizer {
	slow := adaptiveSlowBatch
	if maxBatchDuration > 0 {
		slow = min(slow, maxBatchDuration/4)
	}
	return &batchSizer{base: base, cap: max(cap, base), slow: slow, maxStaged: adaptiveMaxStaged, limit: base}
}

// next is the record limit of the next poll.
func (s *batchSizer) next() int { return s.limit }

// observe records the last poll and its batch.
func (s *batchSizer) observe(o batchObs) {
	if s.cap <= s.base {
		return
	}
	known := o.lag >= 0
	caughtUp := 2*o.n < s.limit
	backlog := o.n >= s.limit
	if known {
		caughtUp = o.lag < int64(s.base)
		backlog = o.lag >= 2*int64(s.limit)
	}
	switch {
	case o.took > 2*s.slow, o.staged > s.maxStaged:
		s.limit = max(s.limit/2, s.base)
	case caughtUp && known:
		s.limit = s.base
	case caughtUp:
		s.limit = max(s.limit/2, s.base)
	case backlog && o.took <= s.slow && 10*o.txn >= o.took && 2*o.staged <= s.maxStaged:
		s.limit = min(s.limit*2, s.cap)
	}
}
