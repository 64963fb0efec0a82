package engine

import (
	"context"
	"fmt"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
)

// produceGroup produces a batch's records task by task while the batch's
// other tasks still run (round.go): the transaction is open before the
// tasks start, and as the tasks' RunBatch return, their records go to the
// producer without waiting (AsyncProducer), so that the broker's round
// trips overlap the remaining processing and record building. Records go
// in task (partition) order, as one Produce of the whole batch would send
// them: a task's records wait for the tasks before it, so the order within
// every output partition does not depend on which task finished first.
// Ready tasks' records are handed over together once they reach chunk
// records (the last ones when every task finished): every ProduceAsync
// call makes record batches of its own in each partition it writes, and
// a small batch's tasks are better sent in one request.
// wait returns once every produce was acknowledged or failed; only then
// may the loop End the transaction (commit or abort).
//
// Not safe for concurrent use, except for the done callbacks: the loop
// goroutine calls finished and wait.
type produceGroup struct {
	ctx      context.Context
	producer AsyncProducer
	hook     KillHook
	pool     *msgPool // where handed-over record arrays go back
	chunk    int      // records handed over at once, at least (but the last)
	wg       sync.WaitGroup
	running  atomic.Int32 // tasks of the batch whose RunBatch has not returned
	failed   atomic.Bool  // a produce failed: the tasks after it are not produced
	mu       struct {
		sync.Mutex
		err error // the first produce error
	}
	// next[i] is task i's changelog offset after its last changelog record
	// of the batch, -1 without one; a done writes only its own tasks'
	// entries, read after wait.
	next []int64

	// The loop goroutine's own: tasks finished but waiting for an earlier
	// one, the index of the first task not handed over yet, and the
	// records of the tasks before it not handed to the producer yet.
	ready   []readyTask
	isReady []bool
	cursor  int
	pending []Message
	ends    []taskEnd // changelog ends of pending's tasks
}

type readyTask struct {
	msgs  []Message
	clEnd int
}

// taskEnd is a task's changelog end in a produce call: the index after its
// last changelog record.
type taskEnd struct{ task, end int }

// overlapMinRecords is the smallest batch (input records) that produces
// while its tasks run (round.go).
const overlapMinRecords = produceChunk

// produceChunk bounds the records a produce call waits to gather: larger
// batches are handed over in pieces of at least this many records (or a
// third of the batch's input records, if fewer).
const produceChunk = 4096

func newProduceGroup(ctx context.Context, p AsyncProducer, pool *msgPool, tasks, inputRecords int, hook KillHook) *produceGroup {
	g := &produceGroup{ctx: ctx, producer: p, pool: pool, next: make([]int64, tasks),
		hook: hook, chunk: max(1, min(produceChunk, inputRecords/3)),
		ready: make([]readyTask, tasks), isReady: make([]bool, tasks)}
	for i := range g.next {
		g.next[i] = -1
	}
	g.running.Store(int32(tasks))
	return g
}

// finished notes that task i's RunBatch returned with records msgs (clEnd:
// the index after its last changelog record, 0 if none; a task that failed
// passes none: the batch aborts) and hands over the records of every task
// whose turn came, once they make a chunk or every task finished.
func (g *produceGroup) finished(i int, msgs []Message, clEnd int) {
	left := g.running.Add(-1)
	g.ready[i], g.isReady[i] = readyTask{msgs, clEnd}, true
	if len(g.pending) > 0 || (g.cursor < len(g.ready) && g.isReady[g.cursor] && g.cursor+1 < len(g.ready) && g.isReady[g.cursor+1]) {
		// Records of several tasks go together: grow pending once.
		n := 0
		for j := g.cursor; j < len(g.ready) && g.isReady[j]; j++ {
			n += len(g.ready[j].msgs)
		}
		g.pending = slices.Grow(g.pending, n)
	}
	for ; g.cursor < len(g.ready) && g.isReady[g.cursor]; g.cursor++ {
		rt := g.ready[g.cursor]
		g.ready[g.cursor] = readyTask{}
		if rt.clEnd > 0 {
			g.ends = append(g.ends, taskEnd{g.cursor, len(g.pending) + rt.clEnd})
		}
		if g.pending == nil {
			g.pending = rt.msgs // no copy (the task's slice is not used after)
		} else {
			g.pending = append(g.pending, rt.msgs...)
			g.pool.put(rt.msgs)
		}
	}
	if g.failed.Load() {
		g.pool.put(g.pending)
		g.pending, g.ends = nil, nil
		return
	}
	if len(g.pending) > 0 && (len(g.pending) >= g.chunk || left == 0) {
		g.produce(g.pending, g.ends)
		g.pool.put(g.pending) // ProduceAsync does not keep it
		g.pending, g.ends = nil, nil
	}
}

func (g *produceGroup) produce(msgs []Message, ends []taskEnd) {
	g.wg.Add(1)
	n := len(msgs) // (msgs is reused once ProduceAsync returned)
	g.producer.ProduceAsync(g.ctx, msgs, func(offs []int64, err error) {
		defer g.wg.Done()
		if err == nil && len(offs) != n {
			err = fmt.Errorf("produce returned %d offsets for %d records (internal error)", len(offs), n)
		}
		if err != nil {
			g.failed.Store(true)
			g.mu.Lock()
			if g.mu.err == nil {
				g.mu.err = err
			}
			g.mu.Unlock()
			return
		}
		for _, e := range ends {
			g.next[e.task] = offs[e.end-1] + 1
		}
		if g.running.Load() > 0 {
			g.hook.at(AfterTaskProduce)
		}
	})
}

// wait waits for every produce started and returns the first error.
func (g *produceGroup) wait() error {
	g.wg.Wait()
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mu.err
}

// msgPool keeps the record arrays of produced batches for the next
// batches' records (issue #13: building a batch's records in new arrays
// was the largest allocation of the count path). Session.Produce and
// AsyncProducer.ProduceAsync do not keep msgs once they returned, so an
// array goes back right after its produce call. The loop goroutine's own.
// Arrays in the pool are zeroed: they keep no record's bytes alive. The
// pool holds at most maxPooledRecords records in all (8 MiB): unbounded,
// it kept the largest arrays of every batch and raised the peak RSS.
type msgPool struct {
	free  [][]Message
	total int // capacity of the arrays in free
}

// maxPooledRecords bounds the pool's arrays' capacity in all.
const maxPooledRecords = 1 << 16

// get returns an empty array with room for n records: the smallest pooled
// one that fits, else a new one.
func (p *msgPool) get(n int) []Message {
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		return make([]Message, 0, n)
	}
	b := p.free[best]
	last := len(p.free) - 1
	p.free[best], p.free[last] = p.free[last], nil
	p.free = p.free[:last]
	p.total -= cap(b)
	return b
}

// put takes b back once nothing refers to its records.
func (p *msgPool) put(b []Message) {
	if cap(b) == 0 || p.total+cap(b) > maxPooledRecords {
		return
	}
	clear(b)
	p.free = append(p.free, b[:0])
	p.total += cap(b)
}

// commitLocal applies the committed batch to every task's shard:
// Commit(next[i]) of each task, in parallel (each task has a shard of its
// own), on at most GOMAXPROCS goroutines. It waits for all of them and
// returns the first error in partition order: Kafka has the batch, so a
// shard that failed to apply it is restored from the changelog by a
// restart; the tasks that committed stay committed.
func (c *Coordinator) commitLocal(parts []*slot, next []int64) error {
	errs := make([]error, len(parts))
	var done atomic.Int32 // tasks whose Commit returned
	commit := func(i int) {
		c.cfg.KillHook.at(BeforeLocalCommit)
		errs[i] = parts[i].task.Commit(next[i])
		if int(done.Add(1)) < len(parts) && errs[i] == nil {
			c.cfg.KillHook.at(AfterLocalCommit)
		}
	}
	workers := min(len(parts), runtime.GOMAXPROCS(0))
	if workers <= 1 {
		for i := range parts {
			commit(i)
		}
	} else {
		var claimed atomic.Int32
		var wg sync.WaitGroup
		for range workers {
			wg.Go(func() {
				for i := int(claimed.Add(1)) - 1; i < len(parts); i = int(claimed.Add(1)) - 1 {
					commit(i)
				}
			})
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
