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
//   - otherwise the limit holds.
//
// Batch size does not change the protocol: each batch is one transaction
// whatever its size. Not safe for concurrent use: the loop goroutine owns
// it.
type batchSizer struct {
	base, cap int
	slow      time.Duration
	limit     int
}

// batchObs is what the loop measured of one poll and its batch.
type batchObs struct {
	n    int           // records the poll returned
	took time.Duration // poll return to the end of the batch (local commits included)
	txn  time.Duration // the fixed per-transaction part of took: produce tail and End
	lag  int64         // input records beyond the batch on the assigned partitions; -1 unknown
}

// Growth bound of an adaptive sizer: a batch that took longer than this
// (measured on the coordinator's Clock, poll return to commit) stops the
// growth; MaxBatchDuration/4 when that is shorter.
const adaptiveSlowBatch = time.Second

func newBatchSizer(base, cap int, maxBatchDuration time.Duration) *batchSizer {
	slow := adaptiveSlowBatch
	if maxBatchDuration > 0 {
		slow = min(slow, maxBatchDuration/4)
	}
	return &batchSizer{base: base, cap: max(cap, base), slow: slow, limit: base}
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
	case o.took > 2*s.slow:
		s.limit = max(s.limit/2, s.base)
	case caughtUp && known:
		s.limit = s.base
	case caughtUp:
		s.limit = max(s.limit/2, s.base)
	case backlog && o.took <= s.slow && 10*o.txn >= o.took:
		s.limit = min(s.limit*2, s.cap)
	}
}
