package shard

import "sync/atomic"

// WriteBehindBudget bounds the write-behind layers (writebehind.go) of all
// the shards of a process together. Each shard's own bound,
// ShardOptions.WriteBehindBytes, is per partition: with many partitions per
// instance the layers (and the chunks and index each keeps for reuse) grew
// with the partition count, 4 MiB each by default, 1 GiB at 256 partitions
// (issue #29, many partitions). With a budget, a shard's bound is the
// smaller of its own and the budget shared evenly by the open shards that
// use write-behind (at least WriteBehindMinShare), so the layers together
// stay near the budget however many partitions the process owns, and an
// instance with few partitions keeps each shard's full bound.
//
// Safe for concurrent use; nil is no budget (each shard its own bound).
type WriteBehindBudget struct {
	total  int64
	shards atomic.Int64
}

// DefaultWriteBehindBudget is the engine's budget for all of a process's
// shards: 16 partitions at DefaultWriteBehindBytes each.
const DefaultWriteBehindBudget = 16 * DefaultWriteBehindBytes

// WriteBehindMinShare is the least bound a budget gives a shard: below it a
// flush would write few keys per store write, and write-behind's saving
// (one store write per key per flush instead of per batch) would be lost.
const WriteBehindMinShare = 256 << 10

// NewWriteBehindBudget returns a budget of total bytes shared by the shards
// opened with it (ShardOptions.WriteBehindBudget); nil when total <= 0.
func NewWriteBehindBudget(total int64) *WriteBehindBudget {
	if total <= 0 {
		return nil
	}
	return &WriteBehindBudget{total: total}
}

// join counts an open shard; leave undoes it at the shard's Close.
func (b *WriteBehindBudget) join() {
	if b != nil {
		b.shards.Add(1)
	}
}

func (b *WriteBehindBudget) leave() {
	if b != nil {
		b.shards.Add(-1)
	}
}

// bound is the write-behind bound of a shard whose own bound is own.
func (b *WriteBehindBudget) bound(own int64) int64 {
	if b == nil {
		return own
	}
	n := max(b.shards.Load(), 1)
	return min(own, max(b.total/n, WriteBehindMinShare))
}
