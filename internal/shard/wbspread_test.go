package shard_test

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// TestWriteBehindLayersFullAtDrawnShare: shards given the same batches do
// not write their layers in the same batch. Each layer is full at a share
// of the budget drawn in [3/4, 1), so an instance whose partitions fill at
// one pace (keys spread evenly) does not write every shard's layer at
// once; with one fixed bound they all wrote in the same batch. A layer
// never holds more than the budget plus one batch.
func TestWriteBehindLayersFullAtDrawnShare(t *testing.T) {
	const shards, budget = 8, 64 << 10
	val := strings.Repeat("x", 1000)
	batchBytes := int64(0) // what one batch adds to a layer
	var sizes []int64      // the layer's bytes at each write, all shards
	for i := range shards {
		s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), WriteBehindBytes: budget})
		noErr(t, err)
		var v state.ValueState[string]
		declare(t, s, func() { v = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String())) })
		var l log
		for batch := range 200 { // ~200 KiB: three layers or more
			_, before := shard.UnflushedForTest(s)
			stored := shard.StoredOffsetForTest(s)
			commit(t, s, &l, int64(batch), func() {
				s.SetCurrentKey(fmt.Appendf(nil, "k%04d", batch))
				noErr(t, v.Update(val))
			})
			_, after := shard.UnflushedForTest(s)
			if shard.StoredOffsetForTest(s) == stored {
				batchBytes = max(batchBytes, after-before)
				continue
			}
			// Written with this batch: the layer held before bytes.
			if before < budget*3/4 || before >= budget+batchBytes {
				t.Fatalf("shard %d wrote its layer at %d bytes, want [%d, %d)", i, before, budget*3/4, budget+batchBytes)
			}
			sizes = append(sizes, before)
		}
		noErr(t, s.Close())
	}
	if len(sizes) < 2*shards {
		t.Fatalf("%d layer writes, want at least %d", len(sizes), 2*shards)
	}
	distinct := map[int64]bool{}
	for _, n := range sizes {
		distinct[n] = true
	}
	if len(distinct) < 4 {
		t.Fatalf("the %d layer writes came at %d sizes (%v): the shards write together", len(sizes), len(distinct), sizes)
	}
	t.Logf("%d layer writes at %d sizes", len(sizes), len(distinct))
}

// TestBackgroundWritesBounded: with the bound at one, a second shard's
// frozen layer is written only after the first's write returns, and
// neither freezing commit waits for a write.
func TestBackgroundWritesBounded(t *testing.T) {
	defer shard.SetBackgroundWritesForTest(1)()
	const budget = 4 << 10
	val := strings.Repeat("x", 100)
	gates := make([]*gatedStore, 2)
	ss := make([]*shard.Shard, 2)
	for i := range ss {
		g := &gatedStore{Store: kv.NewMemory(), open: make(chan struct{}), started: make(chan struct{}, 4)}
		s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{g}, WriteBehindBytes: budget})
		noErr(t, err)
		s.SetBackgroundFlush(true)
		var v state.ValueState[string]
		declare(t, s, func() { v = must[state.ValueState[string]](t)(shard.NewValueState(s, "v", state.String())) })
		var l log
		commit(t, s, &l, 0, func() { // over the budget
			for k := range 60 {
				s.SetCurrentKey(fmt.Appendf(nil, "k%02d", k))
				noErr(t, v.Update(val))
			}
		})
		g.gate.Store(true)
		froze := make(chan struct{})
		go func() {
			defer close(froze)
			commit(t, s, &l, 1, func() { // full: frozen, written in the background
				s.SetCurrentKey([]byte("k00"))
				noErr(t, v.Update("1"))
			})
		}()
		select {
		case <-froze:
		case <-time.After(10 * time.Second):
			t.Fatalf("shard %d: the commit that froze the layer waited for a write", i)
		}
		gates[i], ss[i] = g, s
	}
	select {
	case <-gates[0].started:
	case <-time.After(10 * time.Second):
		t.Fatal("the first shard's layer is not being written")
	}
	select {
	case <-gates[1].started:
		t.Fatal("the second shard's layer is written while the first's write runs")
	case <-time.After(200 * time.Millisecond):
	}
	close(gates[0].open)
	select {
	case <-gates[1].started:
	case <-time.After(10 * time.Second):
		t.Fatal("the second shard's layer is not written after the first's write returned")
	}
	close(gates[1].open)
	for i, s := range ss {
		noErr(t, shard.AwaitFlushForTest(s))
		if got, want := shard.StoredOffsetForTest(s), s.ChangelogOffset(); got != want {
			t.Fatalf("shard %d: stored offset %d after the write, want the committed %d", i, got, want)
		}
		noErr(t, s.Close())
	}
}
