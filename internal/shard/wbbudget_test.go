package shard_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// TestWriteBehindBudgetAcrossShards: the write-behind layers of many shards
// opened with one WriteBehindBudget stay near the budget together, although
// each shard's own bound (4 MiB, the default) would let them hold 16 × 4 MiB
// (issue #29: 256 partitions kept 1 GiB in write-behind layers). Without
// the budget (nil) the same load leaves over 16 MiB in the layers. Every
// shard's committed state stays readable and exact.
func TestWriteBehindBudgetAcrossShards(t *testing.T) {
	const shards, own = 16, shard.DefaultWriteBehindBytes
	budget := int64(shards) * shard.WriteBehindMinShare // 4 MiB: 256 KiB a shard
	b := shard.NewWriteBehindBudget(budget)
	ss := make([]*shard.Shard, shards)
	vs := make([]state.ValueState[string], shards)
	logs := make([]log, shards)
	for i := range ss {
		s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), WriteBehindBytes: own, WriteBehindBudget: b})
		noErr(t, err)
		defer s.Close()
		declare(t, s, func() { vs[i] = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String())) })
		ss[i] = s
	}
	val := strings.Repeat("x", 1000)
	maxTotal := int64(0)
	for batch := range 60 { // 60 batches × 20 new keys × ~1 KiB a shard: ~1.2 MiB each
		for i, s := range ss {
			commit(t, s, &logs[i], int64(batch), func() {
				for k := range 20 {
					s.SetCurrentKey(fmt.Appendf(nil, "b%03dk%02d", batch, k))
					noErr(t, vs[i].Update(val))
				}
			})
		}
		total := int64(0)
		for _, s := range ss {
			// A frozen layer, being written in the background, is not
			// counted (it goes once written).
			noErr(t, shard.AwaitFlushForTest(s))
			_, n := shard.UnflushedForTest(s)
			total += n
		}
		maxTotal = max(maxTotal, total)
	}
	// One batch (20 keys of ~1 KiB) of slack per shard over the budget.
	if slack := int64(shards) * 24 << 10; maxTotal > budget+slack {
		t.Fatalf("write-behind layers held %d bytes together, budget %d (+%d slack)", maxTotal, budget, slack)
	}
	t.Logf("layers together at most %d bytes, budget %d", maxTotal, budget)
	for i, s := range ss { // the committed state, layer and store, is exact
		commit(t, s, &logs[i], 60, func() {
			for _, batch := range []int{0, 31, 59} {
				s.SetCurrentKey(fmt.Appendf(nil, "b%03dk%02d", batch, 7))
				v, ok, err := vs[i].Get()
				noErr(t, err)
				if !ok || v != val {
					t.Fatalf("shard %d batch %d: read %q, %v", i, batch, v[:min(len(v), 8)], ok)
				}
			}
		})
	}
}
