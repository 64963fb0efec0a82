package enginetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// ErrInjected is wrapped by failures injected with Member.FailNext.
var ErrInjected = errors.New("enginetest: injected failure")

// ErrCrashed is returned by a member (and its disk) after Crash.
var ErrCrashed = errors.New("enginetest: instance crashed")

// Member is a fake engine.Session: one member of the broker's group. Group
// changes are made by the test (Assign, Revoke, Lose, Evict) and queued;
// Poll delivers them, like internal/kafka.Session: records are fetched
// first, events are delivered, and only records of partitions owned after
// delivery are returned. Poll waits for Step before it does anything, so a
// test runs the coordinator's loop one iteration at a time.
type Member struct {
	b     *Broker
	name  string
	trace func(format string, args ...any)

	step chan struct{}
	// abandoned is closed by Abandon.
	abandoned   chan struct{}
	abandonOnce sync.Once

	mu struct {
		sync.Mutex
		queued    []event
		fetchable map[int32]bool // assigned by the group (the fetcher may run)
		leak      map[int32]bool // fetched in the Poll delivering the assignment
		owned     map[int32]bool // reported to the coordinator
		paused    map[int32]bool
		pos       map[engine.Partition]int64
		hwm       map[engine.Partition][2]int64 // high watermark and log start as of the last fetch
		consumed  map[engine.Partition]bool     // polled since the last End
		txn       *txn
		txnLogs   map[*plog]bool
		mustAbort bool // a rebalance hit the open transaction
		evicted   bool // out of the group: no commit can succeed
		fenced    bool
		crashed   bool
		closed    bool
		failNext  map[string]bool
		atEnd     []func()
		// produced holds the open transaction's Produce calls until End
		// (or a kill point) traces them as one line: the engine produces
		// task by task, the traces of a batch stay one line.
		produced      [][]engine.Message
		produceFailed bool // a Produce of the open transaction failed: the rest fail too
	}
}

type event struct {
	kind  string // assigned, revoked, lost, standby
	parts []int32
}

// NewMember returns a member of b's group; trace receives its operations.
func NewMember(b *Broker, name string, trace func(format string, args ...any)) *Member {
	m := &Member{b: b, name: name, trace: trace, step: make(chan struct{}), abandoned: make(chan struct{})}
	m.mu.fetchable, m.mu.leak, m.mu.owned = map[int32]bool{}, map[int32]bool{}, map[int32]bool{}
	m.mu.paused, m.mu.pos, m.mu.consumed = map[int32]bool{}, map[engine.Partition]int64{}, map[engine.Partition]bool{}
	m.mu.hwm = map[engine.Partition][2]int64{}
	m.mu.failNext = map[string]bool{}
	return m
}

// Step lets one Poll proceed; it returns false if done closed first.
func (m *Member) Step(done <-chan struct{}) bool {
	select {
	case m.step <- struct{}{}:
		return true
	case <-done:
		return false
	}
}

// Assign gives the member parts. With leak, the Poll that delivers the
// assignment also returns records of parts fetched before the
// coordinator could pause them (as franz-go may).
func (m *Member) Assign(leak bool, parts ...int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range parts {
		m.mu.fetchable[p] = true
		m.mu.leak[p] = leak
		for _, topic := range m.b.Inputs() {
			tp := engine.Partition{Topic: topic, Partition: p}
			if o, ok := m.b.CommittedOf(topic)[p]; ok {
				m.mu.pos[tp] = o
			} else {
				m.mu.pos[tp] = m.b.logStart(topic, p)
			}
		}
	}
	m.mu.queued = append(m.mu.queued, event{"assigned", parts})
}

// Standby gives the member parts as its full set of standby partitions
// (engine.StandbyEvents), delivered by the next Poll; none drops them all.
func (m *Member) Standby(parts ...int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.queued = append(m.mu.queued, event{"standby", append([]int32{}, parts...)})
}

// Revoke takes parts away in a rebalance; Lose takes them away because the
// member was kicked out. Either aborts the open transaction.
func (m *Member) Revoke(parts ...int32) { m.remove("revoked", parts) }
func (m *Member) Lose(parts ...int32)   { m.remove("lost", parts) }

func (m *Member) remove(kind string, parts []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range parts {
		delete(m.mu.fetchable, p)
	}
	if m.mu.txn != nil {
		m.mu.mustAbort = true
	}
	m.mu.queued = append(m.mu.queued, event{kind, parts})
}

// Evict removes the member from the group without it knowing yet (a long
// pause): its next commit fails the generation check and aborts, even one
// that consumed nothing, and its partitions are reported lost at its next
// Poll.
func (m *Member) Evict() {
	m.mu.Lock()
	var parts []int32
	for p := range m.mu.fetchable {
		parts = append(parts, p)
	}
	m.mu.evicted = true
	m.mu.Unlock()
	m.Lose(sortedParts(toSet(parts))...)
}

// Rejoin ends an eviction (the member joined again).
func (m *Member) Rejoin() {
	m.mu.Lock()
	m.mu.evicted = false
	m.mu.Unlock()
}

// Fence makes every further call fail with engine.ErrFenced (a newer
// instance with the same transactional id started); the open transaction
// aborts.
func (m *Member) Fence() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.fenced = true
	m.abortLocked()
}

// Crash makes every further call fail (the process died); the open
// transaction aborts, as when its successor fences it.
func (m *Member) Crash() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.mu.crashed = true
	m.abortLocked()
}

// FailNext makes the next call of op ("begin", "produce", "commit") fail.
// Two more faults make the next commit fail as a broker that went away
// does, with an error wrapping engine.ErrUnavailable: "commit-unreachable"
// (the transaction aborts: EndTxn never reached the coordinator) and
// "commit-lost" (the transaction commits on the broker, but the answer is
// lost: the caller cannot tell). "produce-hang" makes the next Produce
// wait until Abandon, as a produce already sent to a broker that went down
// does.
func (m *Member) FailNext(op string) {
	m.mu.Lock()
	m.mu.failNext[op] = true
	m.mu.Unlock()
}

// AtEnd runs fn at the start of the next End, while the batch is in flight.
func (m *Member) AtEnd(fn func()) {
	m.mu.Lock()
	m.mu.atEnd = append(m.mu.atEnd, fn)
	m.mu.Unlock()
}

func (m *Member) errLocked(op string) error {
	switch {
	case m.mu.crashed:
		return fmt.Errorf("enginetest: %s: %w", op, ErrCrashed)
	case m.mu.fenced:
		return fmt.Errorf("enginetest: %s: %w", op, engine.ErrFenced)
	case m.mu.closed:
		return fmt.Errorf("enginetest: %s: session closed", op)
	}
	return nil
}

func (m *Member) Poll(ctx context.Context, max int, ev engine.GroupEvents) ([]engine.Message, error) {
	select {
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.step:
	}
	m.mu.Lock()
	if err := m.errLocked("poll"); err != nil {
		m.mu.Unlock()
		return nil, err
	}
	// Fetch first, as franz-go does, then deliver the events.
	fetch := map[int32]bool{}
	for p := range m.mu.fetchable {
		if !m.mu.paused[p] && (m.mu.owned[p] || m.mu.leak[p]) {
			fetch[p] = true
		}
	}
	var recs []engine.Message
	inputs := m.b.Inputs()
	for _, p := range sortedParts(fetch) {
		for _, topic := range inputs {
			tp := engine.Partition{Topic: topic, Partition: p}
			if end, start, ok := m.b.offsets(topic, p); ok {
				m.mu.hwm[tp] = [2]int64{end, start}
			}
			for _, r := range m.b.fetch(topic, p, m.mu.pos[tp], max-len(recs)) {
				recs = append(recs, r)
				m.mu.pos[tp] = r.Offset + 1
				m.mu.consumed[tp] = true
			}
		}
	}
	events := m.mu.queued
	m.mu.queued = nil
	m.mu.Unlock()

	for _, e := range events {
		if e.kind == "standby" {
			m.trace("%s: standby %v", m.name, e.parts)
			if se, ok := ev.(engine.StandbyEvents); ok {
				se.Standby(ctx, e.parts)
			}
			continue
		}
		m.mu.Lock()
		for _, p := range e.parts {
			if e.kind == "assigned" {
				m.mu.owned[p] = true
			} else {
				delete(m.mu.owned, p)
				delete(m.mu.leak, p)
			}
		}
		m.mu.Unlock()
		m.trace("%s: %s %v", m.name, e.kind, e.parts)
		var ps []engine.Partition
		for _, p := range e.parts {
			for _, topic := range inputs {
				ps = append(ps, engine.Partition{Topic: topic, Partition: p})
			}
		}
		switch e.kind {
		case "assigned":
			ev.Assigned(ctx, ps)
		case "revoked":
			ev.Revoked(ctx, ps)
		case "lost":
			ev.Lost(ctx, ps)
		}
	}

	m.mu.Lock()
	defer m.mu.Unlock()
	out := recs[:0]
	for _, r := range recs {
		if m.mu.owned[r.Partition] {
			out = append(out, r)
		}
	}
	for p := range m.mu.leak {
		m.mu.leak[p] = false
	}
	if len(out) > 0 {
		m.trace("%s: poll %s", m.name, describe(out))
	}
	return out, nil
}

func (m *Member) Pause(ps []engine.Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		m.mu.paused[p.Partition] = true
	}
	m.trace("%s: pause %v", m.name, partNums(ps))
}

func (m *Member) Resume(ps []engine.Partition) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		delete(m.mu.paused, p.Partition)
	}
	m.trace("%s: resume %v", m.name, partNums(ps))
}

func (m *Member) Begin() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.errLocked("begin"); err != nil {
		return err
	}
	if m.mu.failNext["begin"] {
		delete(m.mu.failNext, "begin")
		return fmt.Errorf("enginetest: begin: %w", ErrInjected)
	}
	if m.mu.txn != nil {
		return errors.New("enginetest: begin: a transaction is open")
	}
	m.mu.txn, m.mu.txnLogs, m.mu.mustAbort = &txn{}, map[*plog]bool{}, false
	m.mu.produced, m.mu.produceFailed = nil, false
	return nil
}

func (m *Member) Produce(_ context.Context, msgs []engine.Message) ([]int64, error) {
	m.mu.Lock()
	if m.mu.failNext["produce-hang"] {
		// A produce sent to a broker that then went down: the Kafka
		// client retries it until the broker returns or the client is
		// closed (Abandon), whatever the call's context.
		delete(m.mu.failNext, "produce-hang")
		m.trace("%s: produce waits for a broker that is down", m.name)
		m.mu.Unlock()
		<-m.abandoned
		return nil, errors.New("enginetest: produce: session closed: client closed")
	}
	defer m.mu.Unlock()
	if err := m.errLocked("produce"); err != nil {
		return nil, err
	}
	if m.mu.txn == nil {
		return nil, errors.New("enginetest: produce: no open transaction")
	}
	if m.mu.failNext["produce"] {
		delete(m.mu.failNext, "produce")
		m.mu.produceFailed = true
		m.trace("%s: produce failed", m.name)
		return nil, fmt.Errorf("enginetest: produce: %w", ErrInjected)
	}
	if m.mu.produceFailed {
		return nil, fmt.Errorf("enginetest: produce: %w", ErrInjected)
	}
	offs, err := m.b.produce(m.mu.txn, m.mu.txnLogs, msgs)
	if err != nil {
		return nil, err
	}
	m.mu.produced = append(m.mu.produced, slices.Clone(msgs)) // the caller reuses msgs
	return offs, nil
}

// ProduceAsync implements engine.AsyncProducer: it produces at once, in
// call order, and calls done on another goroutine.
func (m *Member) ProduceAsync(ctx context.Context, msgs []engine.Message, done func([]int64, error)) {
	offs, err := m.Produce(ctx, msgs)
	go done(offs, err)
}

// FlushProduced traces the open transaction's produced records so far as
// one line "produce <topic>=<n> ...", as if one call had produced them.
func (m *Member) FlushProduced() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.flushProducedLocked()
}

func (m *Member) flushProducedLocked() {
	calls := m.mu.produced
	m.mu.produced = nil
	if len(calls) == 0 {
		return
	}
	var all []engine.Message
	for _, c := range calls {
		all = append(all, c...)
	}
	m.trace("%s: produce %s", m.name, countTopics(all))
}

func (m *Member) End(_ context.Context, commit bool) (bool, error) {
	m.mu.Lock()
	m.flushProducedLocked()
	fns := m.mu.atEnd
	m.mu.atEnd = nil
	m.mu.Unlock()
	for _, fn := range fns {
		fn()
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.errLocked("end"); err != nil {
		return false, err
	}
	if m.mu.txn == nil {
		return false, errors.New("enginetest: end: no open transaction")
	}
	if commit && m.mu.failNext["commit"] {
		delete(m.mu.failNext, "commit")
		m.abortLocked()
		m.trace("%s: commit failed", m.name)
		return false, fmt.Errorf("enginetest: end: %w", ErrInjected)
	}
	if commit && m.mu.failNext["commit-unreachable"] {
		delete(m.mu.failNext, "commit-unreachable")
		m.abortLocked()
		m.trace("%s: commit failed: broker unreachable (aborted)", m.name)
		return false, fmt.Errorf("enginetest: end: dial: connection refused: %w", engine.ErrUnavailable)
	}
	lost := false
	if commit && m.mu.failNext["commit-lost"] && !m.mu.mustAbort && !m.mu.evicted {
		delete(m.mu.failNext, "commit-lost")
		lost = true
	}
	if commit && (m.mu.mustAbort || m.mu.evicted) {
		why := "rebalance"
		if m.mu.evicted {
			why = "evicted: generation fence"
		}
		m.abortLocked()
		m.trace("%s: abort (%s)", m.name, why)
		return false, nil
	}
	if !commit {
		m.abortLocked()
		m.trace("%s: abort", m.name)
		return false, nil
	}
	m.b.mu.Lock()
	m.b.endTxn(m.mu.txn, m.mu.txnLogs, true)
	var offs []string
	for _, tp := range sortedTopicParts(m.mu.consumed) {
		if m.b.committed[tp.Topic] == nil {
			m.b.committed[tp.Topic] = map[int32]int64{}
		}
		m.b.committed[tp.Topic][tp.Partition] = m.mu.pos[tp]
		name := fmt.Sprintf("p%d", tp.Partition)
		if tp.Topic != m.b.input {
			name = tp.Topic + "/" + name
		}
		offs = append(offs, fmt.Sprintf("%s=%d", name, m.mu.pos[tp]))
	}
	m.b.mu.Unlock()
	m.mu.txn, m.mu.consumed = nil, map[engine.Partition]bool{}
	m.trace("%s: commit offsets %v", m.name, offs)
	if lost {
		m.trace("%s: the commit's answer was lost: broker unreachable", m.name)
		return false, fmt.Errorf("enginetest: end: read: connection reset by peer: %w", engine.ErrUnavailable)
	}
	return true, nil
}

// abortLocked aborts the open transaction (if any) and rewinds consumption
// to the committed offsets.
func (m *Member) abortLocked() {
	if m.mu.txn != nil {
		m.b.mu.Lock()
		m.b.endTxn(m.mu.txn, m.mu.txnLogs, false)
		m.b.mu.Unlock()
		m.mu.txn = nil
	}
	m.b.mu.Lock()
	for tp := range m.mu.pos {
		if o, ok := m.b.committed[tp.Topic][tp.Partition]; ok {
			m.mu.pos[tp] = o
		} else {
			m.mu.pos[tp] = m.b.logStartLocked(tp.Topic, tp.Partition)
		}
	}
	m.b.mu.Unlock()
	m.mu.consumed = map[engine.Partition]bool{}
}

func (m *Member) TransactionalID() string { return "app-" + m.name }

// Abandon implements engine.Abandoner: it fails a produce waiting for the
// broker ("produce-hang") and closes the member.
func (m *Member) Abandon() {
	m.abandonOnce.Do(func() {
		m.trace("%s: session abandoned", m.name)
		// Closed first, then the hung produce released: as with a
		// closed Kafka client, every call after the produce fails
		// (otherwise the coordinator's abort could slip in between).
		m.Close()
		close(m.abandoned)
	})
}

// Reopen makes a closed member a new session of the same instance (the
// coordinator rejoins after Kafka was unreachable): out of the group until
// the test assigns it partitions again, with no transaction and nothing
// consumed. An open member is left as it is.
func (m *Member) Reopen() {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mu.closed {
		return
	}
	m.mu.closed, m.mu.mustAbort, m.mu.evicted = false, false, false
	m.mu.queued, m.mu.txn, m.mu.txnLogs, m.mu.produced, m.mu.produceFailed = nil, nil, nil, nil, false
	m.mu.fetchable, m.mu.leak, m.mu.owned = map[int32]bool{}, map[int32]bool{}, map[int32]bool{}
	m.mu.paused, m.mu.pos, m.mu.consumed = map[int32]bool{}, map[engine.Partition]int64{}, map[engine.Partition]bool{}
	m.mu.hwm = map[engine.Partition][2]int64{}
	m.trace("%s: new session", m.name)
}

func (m *Member) Close() error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.mu.closed {
		m.abortLocked()
		m.mu.closed = true
	}
	return nil
}

func (b *Broker) logStart(topic string, p int32) int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.logStartLocked(topic, p)
}

func (b *Broker) logStartLocked(topic string, p int32) int64 {
	if l, err := b.log(topic, p); err == nil {
		return l.start
	}
	return 0
}

func sortedTopicParts(m map[engine.Partition]bool) []engine.Partition {
	out := make([]engine.Partition, 0, len(m))
	for tp, ok := range m {
		if ok {
			out = append(out, tp)
		}
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Topic != out[j].Topic {
			return out[i].Topic < out[j].Topic
		}
		return out[i].Partition < out[j].Partition
	})
	return out
}

// fetch returns up to max committed records of topic/p from offset from.
// HighWatermark implements engine.HighWatermarks: the input partition's
// end offset as of the member's last Poll that fetched it.
func (m *Member) HighWatermark(topic string, p int32) (hwm, logStart int64, ok bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	h, ok := m.mu.hwm[engine.Partition{Topic: topic, Partition: p}]
	return h[0], h[1], ok
}

// offsets returns a partition's log end offset (its high watermark) and
// log start offset.
func (b *Broker) offsets(topic string, p int32) (end, start int64, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return 0, 0, false
	}
	return l.end(), l.start, true
}

func (b *Broker) fetch(topic string, p int32, from int64, max int) []engine.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return nil
	}
	var out []engine.Message
	for o := max64(from, l.start); o < l.lso() && len(out) < max; o++ {
		e := l.entries[o-l.start]
		if !e.marker && (e.txn == nil || e.txn.state == txnCommitted) {
			out = append(out, e.msg)
		}
	}
	return out
}

func (b *Broker) produce(t *txn, logs map[*plog]bool, msgs []engine.Message) ([]int64, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	offs := make([]int64, len(msgs))
	for i, m := range msgs {
		l, err := b.log(m.Topic, m.Partition)
		if err != nil {
			return nil, err
		}
		m.Offset = l.end()
		offs[i] = m.Offset
		l.entries = append(l.entries, entry{msg: m, txn: t, at: time.Now().Add(b.wallSkew)})
		logs[l] = true
	}
	return offs, nil
}

func max64(a, b int64) int64 {
	if a > b {
		return a
	}
	return b
}

func toSet(ps []int32) map[int32]bool {
	m := map[int32]bool{}
	for _, p := range ps {
		m[p] = true
	}
	return m
}

func partNums(ps []engine.Partition) []int32 {
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = p.Partition
	}
	return out
}

// describe is "p0@0-2 p1@5" for polled records.
func describe(recs []engine.Message) string {
	s := ""
	for i := 0; i < len(recs); {
		j := i
		for j+1 < len(recs) && recs[j+1].Partition == recs[i].Partition && recs[j+1].Topic == recs[i].Topic {
			j++
		}
		if s != "" {
			s += " "
		}
		if recs[i].Topic != Input {
			s += recs[i].Topic + "/"
		}
		if i == j {
			s += fmt.Sprintf("p%d@%d", recs[i].Partition, recs[i].Offset)
		} else {
			s += fmt.Sprintf("p%d@%d-%d", recs[i].Partition, recs[i].Offset, recs[j].Offset)
		}
		i = j + 1
	}
	return s
}

// countTopics is "out=2 changelog=3".
func countTopics(msgs []engine.Message) string {
	n := map[string]int{}
	var order []string
	for _, m := range msgs {
		if n[m.Topic] == 0 {
			order = append(order, m.Topic)
		}
		n[m.Topic]++
	}
	s := ""
	for i, t := range order {
		if i > 0 {
			s += " "
		}
		s += fmt.Sprintf("%s=%d", t, n[t])
	}
	return s
}
