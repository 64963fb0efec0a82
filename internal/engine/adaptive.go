package engine

import "time"

// batchSizer chooses the record limit of the loop's next poll (adaptive
// batches, issue #13). A fixed sizer (cap <= base) always returns base.
// An adaptive one starts at base and, from what the last poll returned:
//
//   - a full poll (a backlog) doubles the limit, up to cap, unless the
//     batch took longer than slow: a heavy processor does not grow its
//     batches into long ones (a long batch delays its commit, and so the
//     output's visibility, and nears MaxBatchDuration);
//   - a poll of less than half the limit (caught up) halves it, down to
//     base: small batches keep latency low;
//   - a batch longer than twice slow halves the limit too.
//
// Batch size does not change the protocol: each batch is one transaction
// whatever its size. Not safe for concurrent use: the loop goroutine owns
// it.
type batchSizer struct {
	base, cap int
	slow      time.Duration
	limit     int
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

// observe records the last poll: it returned n records for limit
// next() and its batch took took.
func (s *batchSizer) observe(n int, took time.Duration) {
	if s.cap <= s.base {
		return
	}
	switch {
	case took > 2*s.slow || 2*n < s.limit:
		s.limit = max(s.limit/2, s.base)
	case n >= s.limit && took <= s.slow:
		s.limit = min(s.limit*2, s.cap)
	}
}
