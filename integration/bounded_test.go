package integration

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testprocs"
)

// Bounded runs (App.RunToEnd) on the real broker.

// produceBacklog writes perKey records to each of keys keys ("k000"...),
// interleaved, and returns how many it wrote.
func produceBacklog(t *testing.T, brokers []string, topic string, keys, perKey int) int {
	t.Helper()
	kvs := make([]string, 0, keys*perKey)
	for i := range perKey {
		for k := range keys {
			kvs = append(kvs, fmt.Sprintf("k%03d=v%d", k, i))
		}
	}
	testprocs.Produce(t, brokers, topic, kvs...)
	return len(kvs)
}

// offsetsAtEnd returns the group's committed offsets of topic and the
// topic's last stable offsets.
func offsetsAtEnd(t *testing.T, brokers []string, group, topic string) (committed, ends map[int32]int64) {
	t.Helper()
	adm, err := kafka.NewAdmin(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if committed, err = adm.CommittedOffsets(ctx, group, topic); err != nil {
		t.Fatal(err)
	}
	if ends, err = adm.StableOffsets(ctx, topic); err != nil {
		t.Fatal(err)
	}
	return committed, ends
}

// A 100k-record backlog: RunToEnd processes it in batches of at most the
// adaptive cap (20000 records) and returns nil; the group's committed offsets equal the
// end offsets, every key's counts are exactly 1..n (read_committed), the
// group is left (LeaveGroupOnShutdown). A second run with no new input
// returns at once.
func TestBoundedBacklog(t *testing.T) {
	t.Parallel()
	const parts, keys, perKey = 4, 100, 1000
	e := newSpecEnv(t, parts)
	sent := produceBacklog(t, e.brokers, e.in, keys, perKey)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Kafka.LeaveGroupOnShutdown = true
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()

	app := newSpecApp(t, cfg)
	start := time.Now()
	if err := app.RunToEnd(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("RunToEnd: %v (ctx: %v)", err, ctx.Err())
	}
	took := time.Since(start)
	m := app.Metrics()
	if m.Total.RowsIn != int64(sent) {
		t.Fatalf("RowsIn %d, want %d", m.Total.RowsIn, sent)
	}
	if min := int64(sent / 20000); m.Total.Batches < min { // adaptive batches: at most 20000 records
		t.Fatalf("%d batches for %d records: batches of more than the adaptive cap 20000", m.Total.Batches, sent)
	}
	if st := app.State(); st != kstate.Stopped {
		t.Fatalf("state after RunToEnd %v, want Stopped", st)
	}
	t.Logf("RunToEnd: %d records in %v (%d batches, %d commits)", sent, took.Round(time.Millisecond), m.Total.Batches, m.Total.Commits)

	committed, ends := offsetsAtEnd(t, e.brokers, e.app, e.in)
	if !maps.Equal(committed, ends) || len(ends) != parts {
		t.Fatalf("committed offsets %v, end offsets %v", committed, ends)
	}
	var total int64
	for _, o := range ends {
		total += o
	}
	if total != int64(sent) {
		t.Fatalf("end offsets %v sum to %d, want %d", ends, total, sent)
	}
	ctxR, cancelR := context.WithTimeout(context.Background(), time.Minute)
	got, err := testprocs.Read(ctxR, e.brokers, e.out)
	cancelR()
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, got, sent, keys)

	// LeaveGroupOnShutdown: the group is empty at once.
	ctxG, cancelG := context.WithTimeout(context.Background(), 30*time.Second)
	groups, err := newAdmin(t, e.brokers).DescribeGroups(ctxG, e.app)
	cancelG()
	if err != nil {
		t.Fatal(err)
	}
	if g := groups[e.app]; g.State != "Empty" || len(g.Members) != 0 {
		t.Fatalf("group after RunToEnd with LeaveGroupOnShutdown: state %s, %d members", g.State, len(g.Members))
	}

	// A second run with no new input returns at once.
	app2 := newSpecApp(t, cfg)
	start = time.Now()
	if err := app2.RunToEnd(ctx); err != nil {
		t.Fatalf("second RunToEnd: %v", err)
	}
	again := time.Since(start)
	t.Logf("second RunToEnd, no new input: returned in %v", again.Round(time.Millisecond))
	if again > 10*time.Second {
		t.Fatalf("second RunToEnd took %v", again)
	}
	if m := app2.Metrics(); m.Total.RowsIn != 0 || m.Total.Commits != 0 {
		t.Fatalf("second RunToEnd processed %d rows in %d commits", m.Total.RowsIn, m.Total.Commits)
	}
}

// Input written while a bounded run is in progress is not waited for: with
// a producer writing all along, RunToEnd still returns, and every record it
// processed is counted exactly once (the next run takes the rest).
func TestBoundedDoesNotWaitForNewInput(t *testing.T) {
	t.Parallel()
	const parts, keys = 3, 20
	e := newSpecEnv(t, parts)
	sent := produceBacklog(t, e.brokers, e.in, keys, 500)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Batching.MaxRecords = 500

	var extra atomic.Int64
	stopProducing := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		p, err := kafka.NewProducer(e.brokers)
		if err != nil {
			t.Error(err)
			return
		}
		defer p.Close()
		for i := 0; ; i++ {
			select {
			case <-stopProducing:
				return
			case <-time.After(5 * time.Millisecond):
			}
			k := fmt.Sprintf("k%03d", i%keys)
			if err := p.Produce(context.Background(), kafka.Record{Topic: e.in, Partition: kafka.AnyPartition, Key: []byte(k), Value: []byte("late")}); err != nil {
				t.Error(err)
				return
			}
			extra.Add(1)
		}
	})
	defer func() {
		close(stopProducing)
		wg.Wait()
	}()

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := newSpecApp(t, cfg)
	start := time.Now()
	if err := app.RunToEnd(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("RunToEnd: %v (ctx: %v)", err, ctx.Err())
	}
	rows := app.Metrics().Total.RowsIn
	t.Logf("RunToEnd returned in %v with a producer writing all along: %d rows processed (backlog %d, %d written since the start)",
		time.Since(start).Round(time.Millisecond), rows, sent, extra.Load())
	if rows < int64(sent) {
		t.Fatalf("processed %d rows, fewer than the backlog of %d", rows, sent)
	}
	ctxR, cancelR := context.WithTimeout(context.Background(), time.Minute)
	got, err := testprocs.Read(ctxR, e.brokers, e.out)
	cancelR()
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, got, int(rows), keys)
}

// Exactly-once across a bounded run that is SIGKILLed mid-way, twice
// (after a batch's produce, before a shard's local commit); the rerun
// finishes the job: exit 0, every key's counts exactly 1..n, the committed
// offsets at the ends.
func TestBoundedKilledMidwayRerun(t *testing.T) {
	t.Parallel()
	const parts, keys, perKey = 3, 30, 400
	e := newSpecEnv(t, parts)
	sent := produceBacklog(t, e.brokers, e.in, keys, perKey)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: t.TempDir(),
		in: e.in, out: e.out, maxBatch: 500, proc: "counter", toEnd: true}

	for _, kp := range []string{"after-produce@4", "before-local-commit@7"} {
		args.killPoint = kp
		c := startEOSChild(t, args)
		if !c.wait(2 * time.Minute) {
			c.dump(t)
			t.Fatalf("kill point %s: the bounded run neither finished nor was killed", kp)
		}
		if !c.killedBySIGKILL() {
			c.dump(t)
			t.Fatalf("kill point %s: the child exited (%v) before it was reached", kp, c.state)
		}
	}
	committed, _ := offsetsAtEnd(t, e.brokers, e.app, e.in)
	t.Logf("committed offsets after the kills: %v", committed)

	args.killPoint = ""
	c := startEOSChild(t, args)
	if !c.wait(2 * time.Minute) {
		c.dump(t)
		t.Fatal("the rerun did not finish")
	}
	if !c.state.Success() {
		c.dump(t)
		t.Fatalf("the rerun failed: %v", c.state)
	}
	committed, ends := offsetsAtEnd(t, e.brokers, e.app, e.in)
	if !maps.Equal(committed, ends) {
		t.Fatalf("committed offsets %v, end offsets %v", committed, ends)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	got, err := testprocs.Read(ctx, e.brokers, e.out)
	cancel()
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, got, sent, keys)
}

// Transactional input: the end offset (last stable offset) lies past the
// last commit marker — and here past an aborted transaction — while the
// group commits the offset after the last record it was given. The end
// check probes the stalled partition and finds nothing readable before the
// end: RunToEnd returns, with exactly the committed records counted.
func TestBoundedTransactionalInput(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	vals := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("v%d", i)
		}
		return out
	}
	txn := e.app + "-producer"
	produceTxn(t, e.brokers, txn, e.in, true, vals(50)...)
	produceTxn(t, e.brokers, txn, e.in, true, vals(30)...)
	produceTxn(t, e.brokers, txn, e.in, false, vals(20)...)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	app := newSpecApp(t, e.config(t, testprocs.NewCounter))
	start := time.Now()
	if err := app.RunToEnd(ctx); err != nil || ctx.Err() != nil {
		t.Fatalf("RunToEnd: %v (ctx: %v)", err, ctx.Err())
	}
	committed, ends := offsetsAtEnd(t, e.brokers, e.app, e.in)
	t.Logf("RunToEnd returned in %v; committed offsets %v, end offsets %v", time.Since(start).Round(time.Millisecond), committed, ends)
	ctxR, cancelR := context.WithTimeout(context.Background(), time.Minute)
	got, err := testprocs.Read(ctxR, e.brokers, e.out)
	cancelR()
	if err != nil {
		t.Fatal(err)
	}
	checkCounts(t, got, 80, 1)

	// Nothing new: the second run returns at once (probed, never joined).
	app2 := newSpecApp(t, e.config(t, testprocs.NewCounter))
	start = time.Now()
	if err := app2.RunToEnd(ctx); err != nil {
		t.Fatalf("second RunToEnd: %v", err)
	}
	t.Logf("second RunToEnd returned in %v", time.Since(start).Round(time.Millisecond))
	if m := app2.Metrics(); m.Total.Commits != 0 {
		t.Fatalf("second RunToEnd committed %d transactions", m.Total.Commits)
	}
}
