package engine

import (
	"context"
	"log/slog"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// slowCloseStore is a store whose Close takes closeTime: a large shard
// flushing its memtables.
type slowCloseStore struct{ kv.Store }

const closeTime = 500 * time.Millisecond

func (slowCloseStore) Close() error { time.Sleep(closeTime); return nil }

// TestStandbyHandsOverBeforeClosing: when an assignment makes one of a
// standby reader's partitions active and drops another from its standby
// set in the same rebalance, the reader hands the active one's shard over
// before it closes the dropped one. Closing a large shard takes a while;
// in a join with standbys (bench scale, issue #27) a moved partition
// waited 0.45-0.9 s behind the close of a lower-numbered standby shard
// before its new owner could start.
func TestStandbyHandsOverBeforeClosing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := realClock{start: time.Now()}
		pos, err := NewShardPositions(ShardPositionsConfig{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		cl := &slowChangelog{perChunk: time.Millisecond, chunk: 100}
		c := &Coordinator{clock: clk, log: slog.New(slog.DiscardHandler)}
		c.cfg = CoordinatorConfig{Changelog: cl, ChangelogTopic: "app-changelog", Positions: pos,
			StandbyRefresh: time.Second, StandbyTurnRecords: 1000, StandbyBytesPerSecond: -1,
			NewTask: func(p int32) (TaskHandle, error) {
				sh, err := shard.OpenShard(shard.ShardOptions{Backend: slowCloseStore{kv.NewMemory()}})
				return shardOnlyTask{sh: sh, p: p}, err
			}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.workCtx = ctx
		c.standby = newStandbys(c)
		c.standby.set([]int32{1, 4})
		defer c.standby.stop()
		for !c.standby.status()[1].Open || !c.standby.status()[4].Open {
			time.Sleep(10 * time.Millisecond)
		}
		// The rebalance: 4 becomes active in this process, 1 is dropped.
		pos.reserveActive(4)
		c.standby.set(nil)
		start := time.Now()
		if err := pos.awaitActive(ctx, 4); err != nil {
			t.Fatal(err)
		}
		took := time.Since(start)
		handed := pos.takeHanded(4, c)
		if handed == nil {
			t.Fatal("the standby shard of partition 4 was closed, not handed over open")
		}
		handed.Close()
		if took >= closeTime {
			t.Fatalf("the active partition waited %v for its standby shard: behind the close of another standby shard (%v)", took, closeTime)
		}
	})
}
