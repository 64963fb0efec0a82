package engine

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// TestStandbyYieldsToBacklog: a standby reader keeping up with a busy
// changelog while an active pipeline of its process has a backlog takes
// at most about standbyBusyShare of the time (reading a chunk takes 10ms
// here, and the changelog grows by as much as a reader could read at full
// speed, so a reader that did not yield would read all the time); once the
// backlog is gone it catches up, and the standby shard then holds exactly
// every key's newest value at the changelog's end.
func TestStandbyYieldsToBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := realClock{start: time.Now()}
		pos, err := NewShardPositions(ShardPositionsConfig{Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		cl := &slowChangelog{perChunk: 10 * time.Millisecond, chunk: 100}
		store := keptStore{kv.NewMemory()} // read after the standby closed its shard
		c := &Coordinator{clock: clk, log: slog.New(slog.DiscardHandler)}
		c.cfg = CoordinatorConfig{Changelog: cl, ChangelogTopic: "app-changelog", Positions: pos,
			StandbyRefresh: time.Second, StandbyTurnRecords: 1000, StandbyBytesPerSecond: -1,
			NewTask: func(p int32) (TaskHandle, error) {
				sh, err := shard.OpenShard(shard.ShardOptions{Backend: store})
				return shardOnlyTask{sh: sh, p: p}, err
			}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		c.workCtx = ctx
		c.standby = newStandbys(c)
		c.standby.set([]int32{0})
		defer c.standby.stop()

		// 10s of an active pipeline with a backlog (noted after every batch,
		// as the coordinator's loop does) while the other instance's
		// pipeline writes 1,000 records to the changelog every 100ms:
		// reading them takes 100ms at full speed.
		const keys = 300
		busy := 10 * time.Second
		for clk.Elapsed() < busy {
			cl.append(1000, keys)
			pos.noteBacklog(5000, 1_000_000, clk.Elapsed())
			time.Sleep(100 * time.Millisecond)
		}
		reading := cl.readTime()
		if share := reading.Seconds() / busy.Seconds(); share > 2*standbyBusyShare {
			t.Errorf("the standby read %v of %v with a backlog (%.0f%%), want about %.0f%% at most", reading, busy, 100*share, 100*standbyBusyShare)
		}
		end := cl.end()
		lagging := c.standby.status()[0].Position
		if lagging >= end {
			t.Errorf("the standby is at %d of %d after the backlog: it cannot have yielded", lagging, end)
		}
		// The backlog is gone (no batch notes it any more): the standby
		// catches up at full speed.
		deadline := clk.Elapsed() + time.Minute
		for c.standby.status()[0].Position < end {
			if clk.Elapsed() > deadline {
				t.Fatalf("the standby did not catch up without a backlog: at %d of %d after a minute", c.standby.status()[0].Position, end)
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Logf("with a backlog: read %v of %v, standby at %d of %d; caught up in %v", reading, busy, lagging, end, clk.Elapsed()-busy)
		c.standby.stop()
		for k := range keys {
			v, ok, err := store.Get(changelogfmt.StateKey(1, fmt.Appendf(nil, "k%d", k), nil))
			if want := cl.newest(k); err != nil || !ok || string(v) != string(want) {
				t.Fatalf("key k%d = %q (found %v, err %v) in the standby shard, want %q", k, v, ok, err, want)
			}
		}
	})
}

// keptStore is a store its shard's Close leaves open.
type keptStore struct{ kv.Store }

func (keptStore) Close() error { return nil }

// shardOnlyTask is a standby's task: only its shard.
type shardOnlyTask struct {
	TaskHandle
	sh *shard.Shard
	p  int32
}

func (t shardOnlyTask) Partition() int32    { return t.p }
func (t shardOnlyTask) ShardDir() string    { return "" }
func (t shardOnlyTask) Shard() *shard.Shard { return t.sh }
func (t shardOnlyTask) Close() error        { return t.sh.Close() }

// slowChangelog is one changelog partition whose reads take perChunk
// (time.Sleep: the bubble's time) per chunk of records, and counts it.
type slowChangelog struct {
	perChunk time.Duration
	chunk    int

	mu      sync.Mutex
	log     []Message
	reading time.Duration
}

func (l *slowChangelog) append(n, keys int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	for range n {
		off := int64(len(l.log))
		k := int(off) % keys
		l.log = append(l.log, Message{Offset: off, Key: changelogfmt.StateKey(1, fmt.Appendf(nil, "k%d", k), nil),
			Value: changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, fmt.Appendf(nil, "v%d", off))})
	}
}

// newest is key k's newest value.
func (l *slowChangelog) newest(k int) []byte {
	l.mu.Lock()
	defer l.mu.Unlock()
	for i := len(l.log) - 1; i >= 0; i-- {
		if string(l.log[i].Key) == string(changelogfmt.StateKey(1, fmt.Appendf(nil, "k%d", k), nil)) {
			return l.log[i].Value
		}
	}
	return nil
}

func (l *slowChangelog) end() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return int64(len(l.log))
}

func (l *slowChangelog) readTime() time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.reading
}

func (l *slowChangelog) Open(_ context.Context, _ string, _ int32, from int64) (ChangelogReader, error) {
	return &slowReader{l: l, pos: from, endAt: l.end()}, nil
}

func (l *slowChangelog) Reseed(context.Context, string, int32, []Message) (int64, error) {
	return 0, fmt.Errorf("not in this test")
}

type slowReader struct {
	l          *slowChangelog
	pos, endAt int64
}

func (r *slowReader) Next(ctx context.Context) ([]Message, error) {
	if r.pos >= r.endAt {
		return nil, io.EOF
	}
	if err := (realClock{}).Sleep(ctx, r.l.perChunk); err != nil {
		return nil, err
	}
	r.l.mu.Lock()
	defer r.l.mu.Unlock()
	r.l.reading += r.l.perChunk
	n := min(int64(r.l.chunk), r.endAt-r.pos)
	out := make([]Message, n)
	copy(out, r.l.log[r.pos:r.pos+n])
	r.pos += n
	return out, nil
}

func (r *slowReader) Position() int64 { return r.pos }
func (r *slowReader) End() int64      { return r.endAt }
func (r *slowReader) Close()          {}

// TestNoteBacklog: a batch had a backlog when more records wait than it
// processed (not an empty batch, not an unknown lag); it counts for
// backlogHold; a nil ShardPositions never has one.
func TestNoteBacklog(t *testing.T) {
	sp := &ShardPositions{}
	for _, c := range []struct {
		n   int
		lag int64
	}{{0, 1_000_000}, {500, -1}, {500, 0}, {500, 500}} {
		sp.noteBacklog(c.n, c.lag, time.Second)
		if sp.backlogged(time.Second) {
			t.Errorf("batch of %d records, lag %d after it: a backlog", c.n, c.lag)
		}
	}
	sp.noteBacklog(500, 501, time.Second)
	if !sp.backlogged(time.Second) || !sp.backlogged(time.Second+backlogHold-1) || sp.backlogged(time.Second+backlogHold) {
		t.Errorf("a backlog noted at 1s: backlogged at 1s %v, just before 1s+hold %v, at 1s+hold %v",
			sp.backlogged(time.Second), sp.backlogged(time.Second+backlogHold-1), sp.backlogged(time.Second+backlogHold))
	}
	var none *ShardPositions
	none.noteBacklog(500, 1_000_000, 0)
	if none.backlogged(0) {
		t.Error("a nil ShardPositions has a backlog")
	}
	if got := busyPause(time.Second, 100*time.Millisecond); got != 2*time.Second {
		t.Errorf("busyPause after a turn of 100ms at 1s = %v, want 2s (10%% of the time)", got)
	}
}
