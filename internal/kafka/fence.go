package kafka

import (
	"context"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// generationFence makes every committed transaction prove the member still
// belongs to the group's current generation.
//
// KIP-447 fences a zombie — a member the group evicted without it noticing
// (long pause, network partition) — through TxnOffsetCommit: the broker
// rejects a stale member id or generation and the transaction aborts. But
// franz-go sends no TxnOffsetCommit, and skips its forced heartbeat, when
// nothing was polled since the last commit. A batch that only fires timers
// (or applies initial state) is such a transaction: without a fence, a
// zombie would commit changelog and output records for partitions another
// member already restored and processes — duplicates and diverging state.
//
// So when a commit carries no offsets, the fence adds one unchanged offset
// (the last committed offset of an owned partition) to the TxnOffsetCommit.
// As a side effect the commit is recognized as KIP-447 capable, which spares
// the 500ms lock franz-go holds after an offset-less commit (it cannot tell
// the broker's version without a TxnOffsetCommit response).
//
// Without any known committed offset (a group that never committed) there is
// nothing safe to re-commit and the transaction goes out unfenced.
type generationFence struct {
	mu sync.Mutex
	// owned is the assignment as franz-go reported it. Only an owned
	// partition may be re-committed: re-committing one that moved to
	// another member would rewind that member's committed offset.
	owned     map[Partition]struct{}
	committed map[Partition]kgo.EpochOffset // last committed offset, owned partitions only
	pending   map[Partition]kgo.EpochOffset // offsets in the TxnOffsetCommit of the ending transaction
}

func newGenerationFence() *generationFence {
	return &generationFence{owned: make(map[Partition]struct{}), committed: make(map[Partition]kgo.EpochOffset)}
}

// assigned records newly assigned partitions (group goroutine; before their
// offsets are fetched).
func (f *generationFence) assigned(parts []Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range parts {
		f.owned[p] = struct{}{}
	}
}

// onFetched records the committed offsets of newly assigned partitions
// (kgo.OnOffsetsFetched; group goroutine).
func (f *generationFence) onFetched(_ context.Context, _ *kgo.Client, resp *kmsg.OffsetFetchResponse) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	add := func(topic string, p int32, offset int64, epoch int32, code int16) {
		if _, ok := f.owned[Partition{topic, p}]; ok && code == 0 && offset >= 0 {
			f.committed[Partition{topic, p}] = kgo.EpochOffset{Epoch: epoch, Offset: offset}
		}
	}
	for _, t := range resp.Topics {
		for _, p := range t.Partitions {
			add(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
		}
	}
	for _, g := range resp.Groups { // OffsetFetch v8+
		for _, t := range g.Topics {
			for _, p := range t.Partitions {
				add(t.Topic, p.Partition, p.Offset, p.LeaderEpoch, p.ErrorCode)
			}
		}
	}
	return nil
}

// forget drops partitions that were revoked or lost (group goroutine).
func (f *generationFence) forget(parts []Partition) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, p := range parts {
		delete(f.owned, p)
		delete(f.committed, p)
	}
}

// preCommit runs just before the TxnOffsetCommit is sent (inside
// GroupTransactSession.End, under franz-go's transaction lock: must not
// block). It remembers what is committed and adds the fence when needed.
func (f *generationFence) preCommit(req *kmsg.TxnOffsetCommitRequest) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(req.Topics) == 0 {
		var pick Partition
		var eo kgo.EpochOffset
		found := false
		for p, o := range f.committed {
			if !found || p.Topic < pick.Topic || (p.Topic == pick.Topic && p.Partition < pick.Partition) {
				pick, eo, found = p, o, true
			}
		}
		if found {
			rt := kmsg.NewTxnOffsetCommitRequestTopic()
			rt.Topic = pick.Topic
			rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
			rp.Partition = pick.Partition
			rp.Offset = eo.Offset
			rp.LeaderEpoch = eo.Epoch
			rp.Metadata = &req.MemberID
			rt.Partitions = append(rt.Partitions, rp)
			req.Topics = append(req.Topics, rt)
		}
	}
	f.pending = make(map[Partition]kgo.EpochOffset)
	for _, t := range req.Topics {
		for _, p := range t.Partitions {
			f.pending[Partition{t.Topic, p.Partition}] = kgo.EpochOffset{Epoch: p.LeaderEpoch, Offset: p.Offset}
		}
	}
	return nil
}

// moves returns, by topic and partition, the offset committed before the
// ending transaction (-1 for none) and the one its TxnOffsetCommit carries,
// of every partition the transaction moves (settleUnconfirmed). Empty when
// no TxnOffsetCommit was sent.
func (f *generationFence) moves() map[string]map[int32][2]int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := make(map[string]map[int32][2]int64)
	for p, to := range f.pending {
		from := int64(-1)
		if o, ok := f.committed[p]; ok {
			from = o.Offset
		}
		if to.Offset < 0 || to.Offset == from {
			continue
		}
		if out[p.Topic] == nil {
			out[p.Topic] = make(map[int32][2]int64)
		}
		out[p.Topic][p.Partition] = [2]int64{from, to.Offset}
	}
	return out
}

// ended applies the pending offsets once the transaction committed.
func (f *generationFence) ended(committed bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if committed {
		for p, o := range f.pending {
			if _, ok := f.owned[p]; ok {
				f.committed[p] = o
			}
		}
	}
	f.pending = nil
}
