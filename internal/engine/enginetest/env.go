package enginetest

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Topic names of an Env.
const (
	App   = "app"
	Input = "in"
	// Input2 is the second input topic of "start ... inputs=2".
	Input2 = "in2"
	// RepartitionTopic is the GroupBy topic of "start ... groupby".
	RepartitionTopic = "app-repartition"
	Output           = "out"
	ChangelogTopic   = "app-changelog"
	DeadLetterTopic  = "app-dlq"
)

// Env runs coordinators over a Broker, one loop iteration at a time, for
// scripted scenarios. It must be created and used inside a synctest bubble
// (synctest.Test): after every step it waits until every goroutine is
// blocked, so a scenario is deterministic and never sleeps.
//
// Restores run only between loop iterations: a restore goroutine waits in
// Admin.CommittedOffsets until the loop is parked in Poll again (see
// settle), so whether a partition is ready at a given poll never depends
// on scheduling.
type Env struct {
	B          *Broker
	Clock      *Clock
	Partitions int
	Log        *slog.Logger
	// Dirs, when set before the instances start, gives each instance's
	// shards a directory too, Dirs/<instance>/<partition> (the first
	// pipeline's with "process="), locked while the shard is open (the
	// shard's flock) and holding its position hint; the stores stay in
	// memory. The cleanup then deletes directory and store.
	Dirs string

	mu    sync.Mutex
	gate  chan struct{}
	loop  []string // trace of loop goroutines, in order
	bg    []string // trace of restore goroutines, sorted when shown
	insts map[string]*Instance

	sinkDB *SinkDB // the foreachBatch scenarios' database (sink.go)
	// held: reads of these changelog partitions block until released
	// ("hold-changelog", "release-changelog").
	held map[int32]chan struct{}
}

// Instance is one application instance: its coordinator, group member and
// local disks (shard stores, kept across tasks and restarts).
type Instance struct {
	name  string
	m     *Member
	mu    sync.Mutex // guards disks and opens: restores open tasks concurrently
	disks map[int32]*Disk
	// opens counts the shard opens (NewTask) of each partition by this
	// instance's coordinator ("opens" command).
	opens  map[int32]int
	coord  *engine.Coordinator
	cancel context.CancelFunc
	done   chan struct{}
	err    error
	args   []string
	blocks blocker // keys whose processor calls block (stuck.go)
	obs    observed
	// pos is the instance's (the process's) local shards: positions and
	// standby cleanup (engine.ShardPositions).
	pos *engine.ShardPositions
	// home is the instance whose disks and pos this one uses: itself, or
	// with "process=<inst>" the first pipeline of its process.
	home *Instance
}

// observed records the coordinator's Observer calls ("observed" command).
type observed struct {
	mu     sync.Mutex
	events []string
}

func (o *observed) add(s string) {
	o.mu.Lock()
	o.events = append(o.events, s)
	o.mu.Unlock()
}

func (o *observed) take() string {
	o.mu.Lock()
	defer o.mu.Unlock()
	s := strings.Join(o.events, "\n")
	o.events = nil
	return s
}

func (o *observed) BatchCommitted(b engine.BatchObservation) {
	var ps []string
	for _, p := range b.Partitions {
		s := fmt.Sprintf("p%d in=%d out=%d", p.Partition, p.RecordsIn, p.RecordsOut)
		if p.RecordsIn > 0 {
			s += fmt.Sprintf(" e2e=%v..%v", b.At.Sub(time.UnixMilli(p.NewestMs)), b.At.Sub(time.UnixMilli(p.OldestMs)))
		}
		if p.DeadLetterError != "" {
			s += " dead-letter error: " + p.DeadLetterError
		}
		ps = append(ps, s)
	}
	o.add(fmt.Sprintf("committed duration=%v commit=%v [%s]", b.Duration, b.CommitLatency, strings.Join(ps, ", ")))
}

func (o *observed) Aborted(cause error) { o.add("aborted: " + cause.Error()) }

func (o *observed) Rebalanced(kind string, parts []int32) {
	o.add(fmt.Sprintf("%s %v", kind, parts))
}

// Disk is a shard store that survives its shard's Close (a directory on
// disk); after a crash it refuses writes, like a dead process.
type Disk struct {
	kv.Store
	mu   sync.RWMutex // a write holds it for reading: a kill waits for it
	dead bool
}

func (d *Disk) Write(b *kv.Batch, o kv.WriteOptions) error {
	d.mu.RLock()
	defer d.mu.RUnlock()
	if d.dead {
		return ErrCrashed
	}
	return d.Store.Write(b, o)
}

// kill makes the disk refuse writes from now on. A write in flight (a
// background flush of the dying process) lands whole before kill returns,
// never after: a write that passed the check cannot land once the next
// process uses the disk.
func (d *Disk) kill() {
	d.mu.Lock()
	d.dead = true
	d.mu.Unlock()
}

func (d *Disk) Close() error { return nil }

// NewEnv returns an Env with input and output topics of n partitions.
func NewEnv(n int, log *slog.Logger) *Env {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Env{
		B:          NewBroker(App, Input, map[string]int{Input: n, Input2: n, Output: n}),
		Clock:      NewClock(time.UnixMilli(1_000_000)),
		Partitions: n,
		Log:        log,
		gate:       make(chan struct{}),
		insts:      map[string]*Instance{},
		held:       map[int32]chan struct{}{},
		sinkDB:     newSinkDB(),
	}
}

func (e *Env) traceLoop(format string, args ...any) {
	e.mu.Lock()
	e.loop = append(e.loop, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e *Env) traceBg(format string, args ...any) {
	e.mu.Lock()
	e.bg = append(e.bg, fmt.Sprintf(format, args...))
	e.mu.Unlock()
}

func (e *Env) flush() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	sort.Strings(e.bg)
	out := append(e.loop, e.bg...)
	e.loop, e.bg = nil, nil
	return strings.Join(out, "\n")
}

// settle waits until the loops are parked in Poll (or exited), then lets
// the restores waiting at the gate run until they finish or sleep.
func (e *Env) settle() {
	synctest.Wait()
	e.mu.Lock()
	close(e.gate)
	e.gate = make(chan struct{})
	e.mu.Unlock()
	synctest.Wait()
}

func (e *Env) gateCh() chan struct{} {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.gate
}

// gatedAdmin holds restores (the only callers of CommittedOffsets) at the
// gate.
type gatedAdmin struct {
	Admin
	e *Env
}

func (a gatedAdmin) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	select {
	case <-a.e.gateCh():
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return a.Admin.CommittedOffsets(ctx, group, topic)
}

type tracedChangelog struct {
	Changelog
	e    *Env
	name string
}

func (c tracedChangelog) Open(ctx context.Context, topic string, p int32, from int64) (engine.ChangelogReader, error) {
	rd, err := c.Changelog.Open(ctx, topic, p, from)
	if topic != ChangelogTopic {
		// The input topic read by a bounded run's end check or to re-read
		// a planned batch's records (sink scenarios), not a restore.
		if err != nil {
			c.e.traceBg("%s: read %s p%d from %d: %v", c.name, topic, p, from, errors.Unwrap(err))
			return nil, err
		}
		c.e.traceBg("%s: read %s p%d from %d to %d", c.name, topic, p, from, rd.End())
		return rd, nil
	}
	if err != nil {
		c.e.traceBg("%s: restore p%d from %d: %v", c.name, p, from, errors.Unwrap(err) /* the sentinel */)
		return nil, err
	}
	c.e.traceBg("%s: restore p%d from %d to %d", c.name, p, from, rd.End())
	return heldReader{rd, c.e, p}, nil
}

// heldReader is a changelog reader whose reads block while its partition
// is held (a slow changelog).
type heldReader struct {
	engine.ChangelogReader
	e *Env
	p int32
}

func (r heldReader) Next(ctx context.Context) ([]engine.Message, error) {
	r.e.mu.Lock()
	ch := r.e.held[r.p]
	r.e.mu.Unlock()
	if ch != nil {
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return r.ChangelogReader.Next(ctx)
}

// Exec runs one script command and returns its output.
func (e *Env) Exec(line string) (string, error) {
	f := strings.Fields(line)
	if len(f) == 0 {
		return "", nil
	}
	cmd, args := f[0], f[1:]
	inst := func() (*Instance, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("%s: want an instance name", cmd)
		}
		i := e.insts[args[0]]
		if i == nil {
			return nil, fmt.Errorf("%s: no instance %q", cmd, args[0])
		}
		return i, nil
	}
	switch cmd {
	case "start", "restart":
		if len(args) == 0 {
			return "", fmt.Errorf("%s: want an instance name", cmd)
		}
		old := e.insts[args[0]]
		if cmd == "restart" {
			if old == nil || !old.exited() {
				return "", fmt.Errorf("restart %s: not started or still running", args[0])
			}
			if len(args) == 1 {
				// The same settings, except a kill point.
				args = nil
				for _, a := range old.args {
					if !strings.HasPrefix(a, "kill=") {
						args = append(args, a)
					}
				}
			}
		} else if old != nil {
			return "", fmt.Errorf("start %s: exists (use restart)", args[0])
		}
		if err := e.start(args, old); err != nil {
			return "", err
		}
		e.settle()
		return e.flush(), nil
	case "assign", "revoke", "lose":
		i, err := inst()
		if err != nil {
			return "", err
		}
		var ps []int32
		leak := false
		for _, a := range args[1:] {
			if a == "leak" {
				leak = true
				continue
			}
			p, err := parsePart(a)
			if err != nil {
				return "", err
			}
			ps = append(ps, p)
		}
		switch cmd {
		case "assign":
			i.m.Assign(leak, ps...)
		case "revoke":
			i.m.Revoke(ps...)
		case "lose":
			i.m.Lose(ps...)
		}
		return "", nil
	case "standby":
		// standby <inst> [pN ...]: the member's full standby set, delivered
		// at its next poll.
		i, err := inst()
		if err != nil {
			return "", err
		}
		var ps []int32
		for _, a := range args[1:] {
			p, err := parsePart(a)
			if err != nil {
				return "", err
			}
			ps = append(ps, p)
		}
		i.m.Standby(ps...)
		return "", nil
	case "standbys":
		// The coordinator's standby partitions: "p1{open=true position=4 end=4 records=4}".
		i, err := inst()
		if err != nil {
			return "", err
		}
		st := i.coord.Snapshot().Standbys
		var ps []string
		parts := make([]int32, 0, len(st))
		for p := range st {
			parts = append(parts, p)
		}
		sort.Slice(parts, func(a, b int) bool { return parts[a] < parts[b] })
		for _, p := range parts {
			ps = append(ps, fmt.Sprintf("p%d{%s}", p, st[p]))
		}
		return strings.Join(ps, " "), nil
	case "positions":
		// The instance's local shard positions (ShardPositions.Snapshot).
		i, err := inst()
		if err != nil {
			return "", err
		}
		pos := i.pos.Snapshot()
		var ps []string
		for _, p := range sortedParts(keys(pos)) {
			ps = append(ps, fmt.Sprintf("p%d=%d", p, pos[p]))
		}
		return strings.Join(ps, " "), nil
	case "opens":
		// How many times the instance's coordinator opened each
		// partition's shard (NewTask: for a task or a standby), since it
		// started: "p0=1 p1=2".
		i, err := inst()
		if err != nil {
			return "", err
		}
		i.mu.Lock()
		opens := maps.Clone(i.opens)
		i.mu.Unlock()
		var ps []string
		for _, p := range slices.Sorted(maps.Keys(opens)) {
			ps = append(ps, fmt.Sprintf("p%d=%d", p, opens[p]))
		}
		return strings.Join(ps, " "), nil
	case "hold-changelog", "release-changelog":
		if len(args) != 1 {
			return "", fmt.Errorf("%s pN", cmd)
		}
		p, err := parsePart(args[0])
		if err != nil {
			return "", err
		}
		e.mu.Lock()
		if cmd == "hold-changelog" && e.held[p] == nil {
			e.held[p] = make(chan struct{})
		} else if cmd == "release-changelog" && e.held[p] != nil {
			close(e.held[p])
			delete(e.held, p)
		}
		e.mu.Unlock()
		if cmd == "release-changelog" {
			e.settle()
			return e.flush(), nil
		}
		return "", nil
	case "evict", "rejoin", "fence", "crash", "cancel":
		i, err := inst()
		if err != nil {
			return "", err
		}
		switch cmd {
		case "evict":
			i.m.Evict()
		case "rejoin":
			i.m.Rejoin()
		case "fence":
			i.m.Fence()
		case "crash":
			e.crash(i)
		case "cancel":
			i.cancel()
		}
		return "", nil
	case "fail":
		i, err := inst()
		if err != nil {
			return "", err
		}
		if len(args) != 2 {
			return "", errors.New("fail <inst> begin|produce|produce-hang|commit|commit-unreachable|commit-lost")
		}
		i.m.FailNext(args[1])
		return "", nil
	case "at-end", "at-end2":
		// at-end2: at the second next End (with a sink, the batch's
		// transaction after the plan's).
		i, err := inst()
		if err != nil {
			return "", err
		}
		rest := strings.Join(args[1:], " ")
		fn := func() {
			e.traceLoop("(during the batch: %s)", rest)
			if _, err := e.Exec(rest); err != nil {
				e.traceLoop("at-end %s: %v", rest, err)
			}
		}
		if cmd == "at-end2" {
			i.m.AtEnd(func() { i.m.AtEnd(fn) })
		} else {
			i.m.AtEnd(fn)
		}
		return "", nil
	case "block", "unblock", "exited", "stuck", "in-flight":
		i, err := inst()
		if err != nil {
			return "", err
		}
		return e.stuckCommand(cmd, i, args[1:])
	case "settle":
		e.settle()
		return e.flush(), nil
	case "input":
		return "", e.input(args)
	case "poll":
		i, err := inst()
		if err != nil {
			return "", err
		}
		n := 1
		if len(args) > 1 {
			if n, err = strconv.Atoi(args[1]); err != nil {
				return "", err
			}
		}
		for range n {
			if i.exited() || !i.m.Step(i.done) {
				break
			}
			e.settle()
		}
		out := e.flush()
		if i.exited() {
			out = join(out, fmt.Sprintf("%s: exited: %v", i.name, i.err))
		}
		return out, nil
	case "stop":
		i, err := inst()
		if err != nil {
			return "", err
		}
		i.cancel()
		e.settle()
		<-i.done
		return join(e.flush(), fmt.Sprintf("%s: exited: %v", i.name, i.err)), nil
	case "advance":
		if len(args) != 1 {
			return "", errors.New("advance <duration>")
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return "", err
		}
		e.Clock.Advance(d)
		e.settle()
		return e.flush(), nil
	case "wall-advance", "delete-retention":
		// wall-advance d: the wall clock moves on by d, nothing runs (an
		// outage); delete-retention d: the changelog's delete.retention.ms.
		if len(args) != 1 {
			return "", fmt.Errorf("%s <duration>", cmd)
		}
		d, err := time.ParseDuration(args[0])
		if err != nil {
			return "", err
		}
		if cmd == "wall-advance" {
			e.B.AdvanceWall(d)
		} else {
			e.B.SetDeleteRetention(d)
		}
		return "", nil
	case "compact-changelog":
		if len(args) != 1 {
			return "", errors.New("compact-changelog pN")
		}
		p, err := parsePart(args[0])
		if err != nil {
			return "", err
		}
		return "", e.B.Compact(ChangelogTopic, p)
	case "hide-markers":
		e.B.HideMarkers()
		return "", nil
	case "show-markers":
		e.B.ShowMarkers()
		return "", nil
	case "truncate-changelog":
		if len(args) != 2 {
			return "", errors.New("truncate-changelog pN offset")
		}
		p, err := parsePart(args[0])
		if err != nil {
			return "", err
		}
		to, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return "", err
		}
		return "", e.B.Truncate(ChangelogTopic, p, to)
	case "changelog":
		if len(args) != 1 {
			return "", errors.New("changelog pN")
		}
		p, err := parsePart(args[0])
		if err != nil {
			return "", err
		}
		return e.B.describe(ChangelogTopic, p)
	case "skip":
		// skip pN offset: kstate.SkipRecord of the input record at
		// offset (internal/skip writes this record, application stopped).
		if len(args) != 2 {
			return "", errors.New("skip pN offset")
		}
		p, err := parsePart(args[0])
		if err != nil {
			return "", err
		}
		off, err := strconv.ParseInt(args[1], 10, 64)
		if err != nil {
			return "", err
		}
		k, v := engine.SkipRecord(Input, off)
		return "", e.B.Append(ChangelogTopic, p, engine.Message{Key: k, Value: v})
	case "add-partitions":
		// add-partitions N: the input topic grows to N partitions; input
		// routed by key follows the new layout, as producers would.
		if len(args) != 1 {
			return "", errors.New("add-partitions N")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return "", err
		}
		if err := e.B.AddPartitions(Input, n); err != nil {
			return "", err
		}
		e.Partitions = n
		return "", nil
	case "delete-changelog":
		e.B.Delete(ChangelogTopic)
		return "", nil
	case "fail-metadata":
		// fail-metadata N: the next N partition-count reads fail.
		if len(args) != 1 {
			return "", errors.New("fail-metadata N")
		}
		n, err := strconv.Atoi(args[0])
		if err != nil {
			return "", err
		}
		e.B.FailMetadata(n)
		return "", nil
	case "fail-reseed":
		e.B.FailReseed()
		return "", nil
	case "errtype":
		i, err := inst()
		if err != nil {
			return "", err
		}
		var pc *engine.PartitionsChangedError
		var cl *engine.ChangelogLostError
		var ip *engine.InputPartitionsError
		switch {
		case !i.exited():
			return "running", nil
		case errors.As(i.err, &ip):
			return fmt.Sprintf("input partitions: %s=%d %s=%d", ip.Topic, ip.Partitions, ip.Other, ip.OtherPartitions), nil
		case errors.As(i.err, &pc):
			return fmt.Sprintf("partitions changed: topic=%s old=%d new=%d", pc.Topic, pc.Old, pc.New), nil
		case errors.As(i.err, &cl):
			s := fmt.Sprintf("changelog lost: partition=%d shard_offset=%d state=%d/%v committed=%d/%v",
				cl.Partition, cl.ShardOffset, cl.StateOffset, cl.HasState, cl.Committed, cl.HasCommitted)
			if cl.Input != "" {
				s += " input=" + cl.Input
			}
			return s, nil
		}
		return fmt.Sprintf("other: %v", i.err), nil
	case "recreate-changelog":
		e.B.Recreate(ChangelogTopic)
		return "", nil
	case "wipe-disks":
		i, err := inst()
		if err != nil {
			return "", err
		}
		i.mu.Lock()
		i.disks = map[int32]*Disk{}
		i.mu.Unlock()
		return "", nil
	case "outputs":
		return e.outputs(), nil
	case "repartition":
		// The committed repartition topic: "p1 de=alice.1 from=in".
		var lines []string
		for _, m := range e.B.ReadCommitted(RepartitionTopic) {
			from := ""
			for _, h := range m.Headers {
				if h.Key == engine.HeaderRepartitionInput {
					from = string(h.Value)
				}
			}
			lines = append(lines, fmt.Sprintf("p%d %s=%s from=%s", m.Partition, m.Key, m.Value, from))
		}
		return strings.Join(lines, "\n"), nil
	case "sink":
		return e.sinkDB.show(), nil
	case "sink-fail":
		e.sinkDB.mu.Lock()
		e.sinkDB.fail++
		e.sinkDB.mu.Unlock()
		return "", nil
	case "dead-letters":
		return e.deadLetters(), nil
	case "committed":
		var s []string
		for _, topic := range e.B.Inputs() {
			c := e.B.CommittedOf(topic)
			prefix := ""
			if topic != Input {
				prefix = topic + "/"
			}
			for _, p := range sortedParts(keys(c)) {
				s = append(s, fmt.Sprintf("%sp%d=%d", prefix, p, c[p]))
			}
		}
		return strings.Join(s, " "), nil
	case "create-topic":
		if len(args) != 2 {
			return "", errors.New("create-topic <topic> <partitions>")
		}
		n, err := strconv.Atoi(args[1])
		if err != nil {
			return "", err
		}
		e.B.CreateTopic(args[0], n)
		return "", nil
	case "state":
		i, err := inst()
		if err != nil {
			return "", err
		}
		return i.state()
	case "error":
		i, err := inst()
		if err != nil {
			return "", err
		}
		if !i.exited() {
			return "running", nil
		}
		var ue *engine.UserError
		var se *engine.SinkError
		if errors.As(i.err, &se) {
			return fmt.Sprintf("sink error: partition=%d batch=%d injected=%v", se.Partition, se.BatchID, errors.Is(i.err, ErrSinkInjected)), nil
		}
		return fmt.Sprintf("fenced=%v user=%v crashed=%v injected=%v", errors.Is(i.err, engine.ErrFenced),
			errors.As(i.err, &ue), errors.Is(i.err, ErrCrashed), errors.Is(i.err, ErrInjected)), nil
	case "phase":
		i, err := inst()
		if err != nil {
			return "", err
		}
		s := i.coord.Snapshot()
		var ps []string
		for _, p := range s.Assigned {
			st := s.Status[p]
			ps = append(ps, fmt.Sprintf("p%d{ready=%v wm=%d batch=%d}", p, st.Ready, st.Watermark, st.BatchID))
		}
		return fmt.Sprintf("%v committed=%v %s", s.Phase, s.SinceCommit > 0, strings.Join(ps, " ")), nil
	case "observed":
		i, err := inst()
		if err != nil {
			return "", err
		}
		return i.obs.take(), nil
	case "status":
		// Lag and restore progress per assigned partition.
		i, err := inst()
		if err != nil {
			return "", err
		}
		s := i.coord.Snapshot()
		var ps []string
		for _, p := range s.Assigned {
			st := s.Status[p]
			ps = append(ps, fmt.Sprintf("p%d{lag=%d restored=%d/%d rate=%.0f eta=%v}", p, st.Lag, st.RestoredRecords, st.RestoreTotal, st.RestoreRate, st.RestoreETA))
		}
		return strings.Join(ps, " "), nil
	case "metrics":
		i, err := inst()
		if err != nil {
			return "", err
		}
		s := i.coord.Snapshot()
		return fmt.Sprintf("assigned=%v restoring=%v batches=%d rows_in=%d commits=%d aborts=%d restored=%d initial=%d late=%d fired=%d",
			s.Assigned, s.Restoring, s.Total.Batches, s.Total.RowsIn, s.Total.Commits, s.Total.Aborts,
			s.Total.RestoreRecords, s.Total.InitialStateRows, s.Total.LateRowsDropped, s.Total.TimersFired), nil
	}
	return "", fmt.Errorf("unknown command %q", cmd)
}

// Close stops every running instance (end of a scenario).
func (e *Env) Close() {
	for _, i := range e.insts {
		i.blocks.unblock("")
	}
	for _, i := range e.insts {
		if !i.exited() {
			i.cancel()
		}
	}
	e.settle()
	for _, i := range e.insts {
		<-i.done
	}
}

func (i *Instance) exited() bool {
	select {
	case <-i.done:
		return true
	default:
		return false
	}
}

// start runs a coordinator: start <name> [mode=none|proc|event]
// [initial=k:n,...] [kill=<point>@<n>] [dlq] [bounded] [defer-first]. With old (restart), the disks
// carry over as they were when old stopped. dlq dead-letters undecodable
// records (value "poison"), misrouted records and failing keys to
// DeadLetterTopic. bounded makes it a bounded run (RunToEnd). defer-first
// sets CoordinatorConfig.DeferFirstBatch.
func (e *Env) start(args []string, old *Instance) error {
	name := args[0]
	mode := processor.NoTime
	var init []initialRow
	var kill engine.KillPoint
	killN := 0
	dlq, bounded := false, false
	deferFirst := false
	sink, noOutput := false, false
	var maxBatch, shutdown time.Duration
	traceWarn := false
	topics := []string{Input}
	var cleanup time.Duration
	standbyTurn := 0
	var home *Instance // process=<inst>: a pipeline of that instance's process
	groupBy := false
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		switch k {
		case "mode":
			switch v {
			case "none":
			case "proc":
				mode = processor.ProcessingTime
			case "event":
				mode = processor.EventTime
			default:
				return fmt.Errorf("start: unknown mode %q", v)
			}
		case "initial":
			for _, kv := range strings.Split(v, ",") {
				key, n, ok := strings.Cut(kv, ":")
				c, err := strconv.ParseInt(n, 10, 64)
				if !ok || err != nil {
					return fmt.Errorf("start: initial row %q: want key:count", kv)
				}
				init = append(init, initialRow{key, c})
			}
		case "groupby":
			// The first input is re-keyed by its value through
			// RepartitionTopic.
			groupBy = true
		case "inputs":
			switch v {
			case "1":
			case "2":
				topics = []string{Input, Input2}
			default:
				return fmt.Errorf("start: inputs=%q: want 1 or 2", v)
			}
		case "dlq":
			dlq = true
		case "bounded":
			bounded = true
		case "defer-first":
			deferFirst = true
		case "sink":
			sink = true
		case "no-output":
			noOutput = true
		case "max-batch", "shutdown":
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("start: %s=%q: %v", k, v, err)
			}
			if k == "max-batch" {
				maxBatch = d
			} else {
				shutdown = d
			}
		case "cleanup":
			// cleanup=<duration>: the standby cleanup delay.
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("start: %s=%q: %v", k, v, err)
			}
			cleanup = d
		case "process":
			// process=<inst>: another pipeline of inst's process: the
			// same disks (state directory) and local shards.
			if home = e.insts[v]; home == nil || home.home != home {
				return fmt.Errorf("start: process=%q: no such first pipeline", v)
			}
		case "standby-turn":
			// standby-turn=N: the records of one standby turn.
			n, err := strconv.Atoi(v)
			if err != nil || n <= 0 {
				return fmt.Errorf("start: standby-turn=%q: want a positive count", v)
			}
			standbyTurn = n
		case "logs":
			if v != "warn" {
				return fmt.Errorf("start: logs=%q: want logs=warn", v)
			}
			traceWarn = true
		case "kill":
			p, n, ok := strings.Cut(v, "@")
			c, err := strconv.Atoi(n)
			if !ok || err != nil {
				return fmt.Errorf("start: kill=%q: want point@n", v)
			}
			kill, killN = engine.KillPoint(p), c
		default:
			return fmt.Errorf("start: unknown argument %q", a)
		}
	}
	i := &Instance{name: name, disks: map[int32]*Disk{}, done: make(chan struct{}), args: args}
	if old != nil {
		for p, d := range old.disks {
			i.disks[p] = copyDisk(d)
		}
	}
	i.m = NewMember(e.B, name, e.traceLoop)
	i.home = i
	if home != nil {
		i.home = home
	}
	h := i.home
	pos := h.pos
	if home == nil {
		var err error
		appDir := ""
		if e.Dirs != "" {
			appDir = filepath.Join(e.Dirs, name)
		}
		pos, err = engine.NewShardPositions(engine.ShardPositionsConfig{
			Dir:          appDir,
			CleanupDelay: cleanup,
			Clock:        e.Clock,
			Logger:       e.Log.With("instance", name),
			Remove: func(p int32) error {
				if appDir != "" {
					if err := shard.RemoveShardDir(filepath.Join(appDir, strconv.Itoa(int(p)))); err != nil {
						return err
					}
				}
				h.mu.Lock()
				delete(h.disks, p)
				h.mu.Unlock()
				e.traceBg("%s: shard p%d deleted", name, p)
				return nil
			},
		})
		if err != nil {
			return err
		}
		for p, d := range i.disks {
			if off, ok := diskOffset(d); ok {
				pos.Seed(p, off)
			}
		}
	}
	i.pos = pos
	log := e.Log.With("instance", name)
	if traceWarn {
		log = slog.New(&warnTracer{e: e, name: name, next: e.Log.Handler()}).With("instance", name)
	}
	if shutdown == 0 {
		shutdown = 30 * time.Second
	}
	var initCache *engine.InitialCache[string]
	if init != nil {
		src := initial.FromSeq(func(yield func(string, int64) bool) {
			for _, r := range init {
				if !yield(r.key, r.n) {
					return
				}
			}
		})
		initCache = engine.NewInitialCache(func(ctx context.Context) ([]engine.InitialRow[string], error) {
			e.traceBg("%s: initial state loaded", name)
			return src.Rows(ctx, nil, serde.String())
		})
	}
	var seen atomic.Int64
	hook := func(p engine.KillPoint) {
		if p == kill && seen.Add(1) == int64(killN) {
			i.m.FlushProduced()
			e.traceLoop("%s: killed at %s", name, p)
			e.crash(i)
		}
	}
	outTopic := Output
	if noOutput {
		outTopic = ""
	}
	policy, keyPolicy, dlqTopic := engine.PolicyFail, engine.PolicyAllow, ""
	if dlq {
		policy, keyPolicy, dlqTopic = engine.PolicyDeadLetter, engine.PolicyDeadLetter, DeadLetterTopic
	}
	var groupKeys []func([]byte, string) ([]byte, error)
	repartition, repartitionInput := "", 0
	if groupBy {
		repartition, repartitionInput = RepartitionTopic, len(topics)
		groupKeys = make([]func([]byte, string) ([]byte, error), len(topics)+1)
		groupKeys[0] = func(_ []byte, v string) ([]byte, error) { return []byte(v), nil }
		topics = append(topics, RepartitionTopic)
	}
	e.B.SetInputs(topics...)
	c, err := engine.NewCoordinator(engine.CoordinatorConfig{
		ApplicationID:    App,
		InstanceID:       name,
		RunID:            "run",
		Topics:           topics,
		RepartitionTopic: repartition,
		OutputTopic:      outTopic,
		Sink:             sink,
		ChangelogTopic:   ChangelogTopic,
		DeadLetterTopic:  dlqTopic,
		ProcessingTime:   mode == processor.ProcessingTime,
		TriggerInterval:  time.Second,
		MaxBatchRecords:  100,
		RestoreTimeout:   10 * time.Second,
		RestoreRetry:     50 * time.Millisecond,
		WallNow:          e.B.Now,
		ShutdownTimeout:  shutdown,
		MaxBatchDuration: maxBatch,
		RunToEnd:         bounded,
		// The scenarios' Counter has timers in the time modes.
		BoundedNeedsTasks: bounded && mode != processor.NoTime,
		DeferFirstBatch:   deferFirst,
		Admin:             gatedAdmin{Admin{e.B}, e},
		NewSession:        func() (engine.Session, error) { i.m.Reopen(); return i.m, nil },
		Changelog:         tracedChangelog{Changelog{e.B}, e, name},
		Clock:             e.Clock,
		NewTask: func(p int32) (engine.TaskHandle, error) {
			h.mu.Lock()
			d := h.disks[p]
			if d == nil {
				d = &Disk{Store: kv.NewMemory()}
				h.disks[p] = d
			}
			h.mu.Unlock()
			i.mu.Lock()
			if i.opens == nil {
				i.opens = map[int32]int{}
			}
			i.opens[p]++
			i.mu.Unlock()
			dir := ""
			if e.Dirs != "" {
				dir = filepath.Join(e.Dirs, h.name, strconv.Itoa(int(p)))
			}
			return engine.Open(engine.Config[string, string, string]{
				ApplicationID: App, RunID: "run", Topic: Input, Topics: topics, Partition: p, Backend: d, Dir: dir, WallNow: e.B.Now,
				GroupKeys: groupKeys, RepartitionInput: repartitionInput,
				TimeMode: mode, OutputMode: processor.Append,
				KeySerde: serde.String(), ValueSerde: poisonSerde{}, OutputSerde: serde.String(),
				NewProcessor: func() processor.StatefulProcessor[string, string, string] {
					return &Counter{mode: mode, block: i.blocks.wait, traceRows: len(topics) > 1, trace: func(f string, args ...any) {
						e.traceBg("%s: p%d: "+f, append([]any{name, p}, args...)...)
					}}
				},
				OnDecodeError: policy, OnKeyPartition: keyPolicy, OnProcessingError: policy,
				EventTime: func(v string, ts int64) int64 { return EventTime(v, ts) },
				Initial:   initCache,
				Sink:      e.sinkFor(sink, name),
			})
		},
		KillHook:           hook,
		Logger:             log,
		Observer:           &i.obs,
		Positions:          pos,
		StandbyTurnRecords: standbyTurn,
		// Standby turns run between loop iterations, like restores
		// (see settle): one turn per settle.
		StandbyGate: func(ctx context.Context) error {
			select {
			case <-e.gateCh():
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		},
	})
	if err != nil {
		return err
	}
	i.coord = c
	ctx, cancel := context.WithCancel(context.Background())
	i.cancel = cancel
	e.insts[name] = i
	go func() {
		i.err = c.Run(ctx)
		close(i.done)
	}()
	return nil
}

type initialRow struct {
	key string
	n   int64
}

// crash kills i: its member fails every call and its disks refuse writes,
// as they stand now.
func (e *Env) crash(i *Instance) {
	i.m.Crash()
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, d := range i.disks {
		d.kill()
	}
}

func copyDisk(d *Disk) *Disk {
	n := kv.NewMemory()
	it := d.Store.NewIter(nil, nil)
	var b kv.Batch
	for ok := it.First(); ok; ok = it.Next() {
		b.Put(append([]byte{}, it.Key()...), append([]byte{}, it.Value()...))
	}
	it.Close()
	if b.Len() > 0 {
		if err := n.Write(&b, kv.WriteOptions{}); err != nil {
			panic(err)
		}
	}
	return &Disk{Store: n}
}

// input appends records: "input p0 a b=x c" (to p0) or "input a b" (routed
// by Kafka's partitioner on the key), to the first input topic, or to the
// second with "input in2 ...";
// by Kafka's partitioner on the key); a token is key or key=value (value
// "x" when omitted; "x@ms" sets the record timestamp to ms).
func (e *Env) input(args []string) error {
	part := int32(-1)
	topic := Input
	if len(args) > 0 && args[0] == Input2 {
		topic, args = Input2, args[1:]
	}
	if len(args) > 0 && strings.HasPrefix(args[0], "p") {
		p, err := parsePart(args[0])
		if err != nil {
			return err
		}
		part, args = p, args[1:]
	}
	for _, a := range args {
		k, v, ok := strings.Cut(a, "=")
		if !ok {
			v = "x"
		}
		p := part
		if p < 0 {
			p = engine.PartitionFor([]byte(k), e.Partitions)
		}
		ts := time.UnixMilli(EventTime(v, e.Clock.Now().UnixMilli()))
		if err := e.B.Append(topic, p, engine.Message{Key: []byte(k), Value: []byte(v), Timestamp: ts}); err != nil {
			return err
		}
	}
	return nil
}

// deadLetters is the committed dead-letter topic, one record a line:
// "p0 a=boom stage=process source=p0@1 error=...".
func (e *Env) deadLetters() string {
	var lines []string
	for _, m := range e.B.ReadCommitted(DeadLetterTopic) {
		h := map[string]string{}
		for _, x := range m.Headers {
			h[x.Key] = string(x.Value)
		}
		src := "p" + h[engine.HeaderSourcePartition] + "@" + h[engine.HeaderSourceOffset]
		if exp, ok := h[engine.HeaderTimerExpiry]; ok {
			src = "p" + h[engine.HeaderSourcePartition] + " timer@" + exp
		}
		lines = append(lines, fmt.Sprintf("p%d %s=%s stage=%s source=%s error=%s",
			m.Partition, m.Key, m.Value, h[engine.HeaderStage], src, h[engine.HeaderError]))
	}
	return strings.Join(lines, "\n")
}

// poisonSerde is the scenarios' value serde: a string, except that the
// value "poison" does not decode.
type poisonSerde struct{}

func (poisonSerde) Deserialize(b []byte) (string, error) {
	if string(b) == "poison" {
		return "", errors.New("poison value")
	}
	return string(b), nil
}

// outputs is the committed output: "a=[1 2] b=[1]".
func (e *Env) outputs() string {
	per := map[string][]string{}
	for _, m := range e.B.ReadCommitted(Output) {
		per[string(m.Key)] = append(per[string(m.Key)], string(m.Value))
	}
	return formatPerKey(per)
}

// state is the committed shard state of the instance's disks:
// "p0: a=3 b=1".
func (i *Instance) state() (string, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	var lines []string
	parts := make([]int32, 0, len(i.disks))
	for p := range i.disks {
		parts = append(parts, p)
	}
	sort.Slice(parts, func(a, b int) bool { return parts[a] < parts[b] })
	for _, p := range parts {
		counts, err := readCounts(i.disks[p].Store)
		if err != nil {
			return "", err
		}
		lines = append(lines, fmt.Sprintf("p%d: %s", p, counts))
	}
	return strings.Join(lines, "\n"), nil
}

// readCounts decodes the Counter's only state variable from a store.
func readCounts(s kv.Store) (string, error) {
	lower := []byte{byte(changelog.KindState)}
	it := s.NewIter(lower, []byte{byte(changelog.KindState) + 1})
	defer it.Close()
	var out []string
	for ok := it.First(); ok; ok = it.Next() {
		k, err := changelog.DecodeKey(it.Key())
		if err != nil {
			return "", err
		}
		_, payload, err := changelog.DecodeValue(it.Value())
		if err != nil {
			return "", err
		}
		n, err := state.Int64().Decode(payload)
		if err != nil {
			return "", err
		}
		out = append(out, fmt.Sprintf("%s=%d", k.GroupKey, n))
	}
	sort.Strings(out)
	return strings.Join(out, " "), nil
}

func formatPerKey(per map[string][]string) string {
	ks := make([]string, 0, len(per))
	for k := range per {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var b strings.Builder
	for i, k := range ks {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", k, per[k])
	}
	return b.String()
}

func parsePart(s string) (int32, error) {
	n, err := strconv.Atoi(strings.TrimPrefix(s, "p"))
	if err != nil || !strings.HasPrefix(s, "p") {
		return 0, fmt.Errorf("bad partition %q: want pN", s)
	}
	return int32(n), nil
}

func keys(m map[int32]int64) map[int32]bool {
	out := map[int32]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

func join(a, b string) string {
	if a == "" {
		return b
	}
	return a + "\n" + b
}

// diskOffset reads a shard store's changelog offset (the shard's own key).
func diskOffset(d *Disk) (int64, bool) {
	v, ok, err := d.Store.Get([]byte("\xffoffset"))
	if err != nil || !ok || len(v) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(v)), true
}
