// Package enginetest is an in-memory Kafka for the engine's coordinator: a
// Broker (topics, transactions with commit markers, one consumer group), a
// fake Session per member, a fake Admin and changelog readers, and a manual
// Clock. Produced records become visible only when their transaction
// commits, and the visibility of commit markers on the changelog can be
// delayed to reproduce the commit-marker race. It is a non-test package so
// that other test drivers (a public kstatetest) can reuse it; the scripted
// scenarios of internal/engine drive it through Env (env.go).
package enginetest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"sort"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// Broker is the in-memory cluster. All methods are safe for concurrent use.
type Broker struct {
	mu        sync.Mutex
	topics    map[string][]*plog
	group     string
	committed map[string]map[int32]int64 // the group's committed offsets per input topic
	input     string
	// inputs are the input topics the members consume (input first);
	// SetInputs changes them.
	inputs      []string
	hideMarkers bool
	hidden      []*txn // committed transactions whose markers are not visible yet
	failReseed  bool   // the next Reseed produces, aborts and fails (a crash mid-transaction)
	failMeta    int    // the next failMeta Admin.Partitions calls fail
	// wallSkew is added to the bubble's clock for the record timestamps
	// and the coordinators' WallNow (AdvanceWall); deleteRetention is the
	// changelog's delete.retention.ms Admin reports (0: unknown).
	wallSkew, deleteRetention time.Duration
}

type txnState int

const (
	txnOpen txnState = iota
	txnCommitted
	txnAborted
)

type txn struct {
	state   txnState
	visible bool // committed and its markers visible (LSO moved past it)
}

type entry struct {
	msg    engine.Message
	txn    *txn // nil: non-transactional
	marker bool
	// removed: by compaction (Compact); readers skip it like a marker.
	removed bool
	// at is when a transactional produce appended it (Now): a reader's
	// record has it as its timestamp when the producer set none.
	at time.Time
}

type plog struct {
	start   int64 // log start offset
	entries []entry
}

func (l *plog) end() int64 { return l.start + int64(len(l.entries)) }

// lso is the last stable offset: the first offset of a transaction that is
// open or whose commit marker is not visible yet.
func (l *plog) lso() int64 {
	for i, e := range l.entries {
		if e.txn != nil && (e.txn.state == txnOpen || (e.txn.state == txnCommitted && !e.txn.visible)) {
			return l.start + int64(i)
		}
	}
	return l.end()
}

// NewBroker returns a cluster with the given topics (name → partitions);
// group is the consumer group of the input topic.
func NewBroker(group, input string, topics map[string]int) *Broker {
	b := &Broker{topics: map[string][]*plog{}, group: group, input: input, inputs: []string{input}, committed: map[string]map[int32]int64{}}
	for t, n := range topics {
		b.topics[t] = newLogs(n)
	}
	return b
}

func newLogs(n int) []*plog {
	ls := make([]*plog, n)
	for i := range ls {
		ls[i] = &plog{}
	}
	return ls
}

func (b *Broker) log(topic string, p int32) (*plog, error) {
	ls, ok := b.topics[topic]
	if !ok {
		return nil, fmt.Errorf("enginetest: topic %q not found", topic)
	}
	if p < 0 || int(p) >= len(ls) {
		return nil, fmt.Errorf("enginetest: topic %q has no partition %d", topic, p)
	}
	return ls[p], nil
}

// Append writes non-transactional records (e.g. input) to topic/p.
func (b *Broker) Append(topic string, p int32, msgs ...engine.Message) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return err
	}
	for _, m := range msgs {
		m.Topic, m.Partition, m.Offset = topic, p, l.end()
		l.entries = append(l.entries, entry{msg: m})
	}
	return nil
}

// Committed returns the group's committed offsets of the (first) input
// topic.
func (b *Broker) Committed() map[int32]int64 { return b.CommittedOf(b.input) }

// CommittedOf returns the group's committed offsets of an input topic.
func (b *Broker) CommittedOf(topic string) map[int32]int64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	out := make(map[int32]int64, len(b.committed[topic]))
	for p, o := range b.committed[topic] {
		out[p] = o
	}
	return out
}

// SetInputs makes the members consume topics (the first is the broker's
// input topic), partition p of each assigned together as by Kafka's range
// assignor.
func (b *Broker) SetInputs(topics ...string) {
	b.mu.Lock()
	b.inputs = append([]string(nil), topics...)
	b.mu.Unlock()
}

// Inputs returns the input topics.
func (b *Broker) Inputs() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.inputs...)
}

// CreateTopic (re)creates topic with n empty partitions.
func (b *Broker) CreateTopic(topic string, n int) {
	b.mu.Lock()
	b.topics[topic] = newLogs(n)
	b.mu.Unlock()
}

// ReadCommitted returns topic's records of committed transactions (and
// non-transactional ones), per partition in offset order, partitions in
// order. Unlike a changelog reader it ignores marker visibility: it is
// for checking outputs.
func (b *Broker) ReadCommitted(topic string) []engine.Message {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []engine.Message
	for _, l := range b.topics[topic] {
		for _, e := range l.entries {
			if !e.marker && (e.txn == nil || e.txn.state == txnCommitted) {
				out = append(out, e.msg)
			}
		}
	}
	return out
}

// HideMarkers makes the commit markers of transactions committed from now
// on invisible to readers (the last stable offset stays before them) until
// ShowMarkers: the window in which a new owner's restore can miss the last
// committed batch.
func (b *Broker) HideMarkers() {
	b.mu.Lock()
	b.hideMarkers = true
	b.mu.Unlock()
}

// ShowMarkers makes every hidden commit marker visible and stops hiding.
func (b *Broker) ShowMarkers() {
	b.mu.Lock()
	for _, t := range b.hidden {
		t.visible = true
	}
	b.hidden, b.hideMarkers = nil, false
	b.mu.Unlock()
}

// Truncate deletes the records of topic/p below offset to (DeleteRecords):
// a reader from a lower non-zero offset gets ErrOffsetOutOfRange.
func (b *Broker) Truncate(topic string, p int32, to int64) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return err
	}
	if to > l.end() {
		to = l.end()
	}
	if to > l.start {
		l.entries = l.entries[to-l.start:]
		l.start = to
	}
	return nil
}

// Now is the wall clock of the cluster: the bubble's, moved on by
// AdvanceWall (record timestamps, the coordinators' WallNow).
func (b *Broker) Now() time.Time {
	b.mu.Lock()
	defer b.mu.Unlock()
	return time.Now().Add(b.wallSkew)
}

// AdvanceWall moves the wall clock on by d without running anything (an
// outage: nothing polls meanwhile).
func (b *Broker) AdvanceWall(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.wallSkew += d
}

// SetDeleteRetention sets the delete.retention.ms Admin reports.
func (b *Broker) SetDeleteRetention(d time.Duration) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.deleteRetention = d
}

// Compact does what the log cleaner does once every tombstone of topic/p
// is older than delete.retention.ms: of the committed records below the
// LSO it keeps each key's newest, unless that is a tombstone, and removes
// the rest. Offsets do not change.
func (b *Broker) Compact(topic string, p int32) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return err
	}
	upto := l.lso() - l.start
	newest := map[string]int64{}
	for i := range upto {
		e := &l.entries[i]
		if !e.marker && !e.removed && e.txn != nil && e.txn.state == txnCommitted {
			newest[string(e.msg.Key)] = i
		}
	}
	for i := range upto {
		e := &l.entries[i]
		if e.marker || e.removed {
			continue
		}
		if j, ok := newest[string(e.msg.Key)]; !ok || j != i || e.msg.Value == nil {
			e.removed = true
		}
	}
	return nil
}

// Recreate deletes and recreates topic with the same partition count: its
// offsets start again from 0.
func (b *Broker) Recreate(topic string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.topics[topic] = newLogs(len(b.topics[topic]))
}

// AddPartitions grows topic to n partitions (CreatePartitions); existing
// partitions keep their records.
func (b *Broker) AddPartitions(topic string, n int) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ls, ok := b.topics[topic]
	if !ok || n < len(ls) {
		return fmt.Errorf("enginetest: cannot grow topic %q to %d partitions", topic, n)
	}
	b.topics[topic] = append(ls, newLogs(n-len(ls))...)
	return nil
}

// Delete deletes topic; EnsureChangelog creates it again, empty.
func (b *Broker) Delete(topic string) {
	b.mu.Lock()
	delete(b.topics, topic)
	b.mu.Unlock()
}

// FailMetadata makes the next n Admin.Partitions calls fail.
func (b *Broker) FailMetadata(n int) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.failMeta = n
}

// FailReseed makes the next Changelog.Reseed write its records in a
// transaction, abort it and fail, as a crash in the middle of a re-seed
// would leave the log.
func (b *Broker) FailReseed() {
	b.mu.Lock()
	b.failReseed = true
	b.mu.Unlock()
}

// end finishes a transaction that wrote to parts: markers are appended and
// the committed transaction becomes visible unless markers are hidden.
// Called with b.mu held.
func (b *Broker) endTxn(t *txn, parts map[*plog]bool, commit bool) {
	if commit {
		t.state = txnCommitted
		if b.hideMarkers {
			b.hidden = append(b.hidden, t)
		} else {
			t.visible = true
		}
	} else {
		t.state = txnAborted
	}
	logs := make([]*plog, 0, len(parts))
	for l := range parts {
		logs = append(logs, l)
	}
	for _, l := range logs {
		l.entries = append(l.entries, entry{msg: engine.Message{Offset: l.end()}, txn: t, marker: true})
	}
}

// Admin is an engine.Admin over the broker.
type Admin struct{ B *Broker }

func (a Admin) Partitions(_ context.Context, topic string) (int, error) {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	if a.B.failMeta > 0 {
		a.B.failMeta--
		return 0, errors.New("enginetest: metadata request failed")
	}
	ls, ok := a.B.topics[topic]
	if !ok {
		return 0, fmt.Errorf("%w: enginetest: topic %q not found", engine.ErrUnknownTopic, topic)
	}
	return len(ls), nil
}

// EnsureDeadLetter creates topic with n partitions if missing.
func (a Admin) EnsureDeadLetter(_ context.Context, topic string, n int) (int, error) {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	ls, ok := a.B.topics[topic]
	if !ok {
		a.B.topics[topic] = newLogs(n)
		return n, nil
	}
	return len(ls), nil
}

func (a Admin) EnsureChangelog(_ context.Context, topic string, n int) error {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	ls, ok := a.B.topics[topic]
	if !ok {
		a.B.topics[topic] = newLogs(n)
		return nil
	}
	if len(ls) != n {
		return fmt.Errorf("enginetest: changelog %q has %d partitions, want %d", topic, len(ls), n)
	}
	return nil
}

// DeleteRetention makes Admin an engine.RetentionDescriber
// (SetDeleteRetention).
func (a Admin) DeleteRetention(_ context.Context, _ string) (time.Duration, error) {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	return a.B.deleteRetention, nil
}

func (a Admin) CommittedOffsets(_ context.Context, group, topic string) (map[int32]int64, error) {
	if group != a.B.group {
		return map[int32]int64{}, nil
	}
	return a.B.CommittedOf(topic), nil
}

// EndOffsets implements engine.EndOffsetter: the log end of every
// partition of topic.
func (a Admin) EndOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	return a.offsets(topic, func(l *plog) int64 { return l.end() })
}

// StableOffsets is the engine.StableOffsetter of bounded runs: every
// partition's last stable offset.
func (a Admin) StableOffsets(_ context.Context, topic string) (map[int32]int64, error) {
	return a.offsets(topic, func(l *plog) int64 { return l.lso() })
}

func (a Admin) offsets(topic string, of func(*plog) int64) (map[int32]int64, error) {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	ls, ok := a.B.topics[topic]
	if !ok {
		return nil, fmt.Errorf("%w: enginetest: topic %q not found", engine.ErrUnknownTopic, topic)
	}
	out := make(map[int32]int64, len(ls))
	for p, l := range ls {
		out[int32(p)] = of(l)
	}
	return out, nil
}

// DropEmptyTopic implements engine.TopicDropper: it deletes topic if no
// record was ever appended to it.
func (a Admin) DropEmptyTopic(_ context.Context, topic string) (bool, error) {
	a.B.mu.Lock()
	defer a.B.mu.Unlock()
	ls, ok := a.B.topics[topic]
	if !ok {
		return false, fmt.Errorf("%w: enginetest: topic %q not found", engine.ErrUnknownTopic, topic)
	}
	for _, l := range ls {
		if l.end() != 0 {
			return false, nil
		}
	}
	delete(a.B.topics, topic)
	return true, nil
}

// GroupOffsets is CommittedOffsets, never held at the Env's gate.
func (a Admin) GroupOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	return a.CommittedOffsets(ctx, group, topic)
}

// Changelog opens readers over the broker.
type Changelog struct{ B *Broker }

func (c Changelog) Open(_ context.Context, topic string, p int32, from int64) (engine.ChangelogReader, error) {
	b := c.B
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return nil, err
	}
	if from == 0 {
		from = l.start
	}
	if from < l.start || from > l.end() {
		return nil, fmt.Errorf("%w: topic %q partition %d: start offset %d is outside the log [%d, %d]",
			engine.ErrOffsetOutOfRange, topic, p, from, l.start, l.end())
	}
	return &reader{b: b, l: l, pos: from, end: max(l.lso(), from)}, nil
}

// Reseed writes msgs to topic/p in one transaction of its own.
func (c Changelog) Reseed(_ context.Context, topic string, p int32, msgs []engine.Message) (int64, error) {
	b := c.B
	t, logs := &txn{}, map[*plog]bool{}
	offs, err := b.produce(t, logs, msgs)
	b.mu.Lock()
	defer b.mu.Unlock()
	if err != nil {
		b.endTxn(t, logs, false)
		return 0, err
	}
	if b.failReseed {
		b.failReseed = false
		b.endTxn(t, logs, false)
		return 0, fmt.Errorf("enginetest: reseed: %w", ErrInjected)
	}
	if len(offs) == 0 {
		return 0, nil // an empty shard: restore from the log start
	}
	b.endTxn(t, logs, true)
	return offs[len(offs)-1] + 1, nil
}

// reader reads committed records up to the LSO captured at open, two at a
// time (so a restore takes several rounds), stepping past markers and
// aborted records.
type reader struct {
	b        *Broker
	l        *plog
	pos, end int64
}

func (r *reader) Next(ctx context.Context) ([]engine.Message, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	r.b.mu.Lock()
	defer r.b.mu.Unlock()
	var out []engine.Message
	for r.pos < r.end && len(out) < 2 {
		i := r.pos - r.l.start
		if i < 0 || i >= int64(len(r.l.entries)) {
			return nil, fmt.Errorf("enginetest: offset %d deleted while reading", r.pos)
		}
		e := r.l.entries[i]
		r.pos++
		if e.marker || e.removed || (e.txn != nil && e.txn.state != txnCommitted) {
			continue
		}
		m := e.msg
		if m.Timestamp.IsZero() {
			m.Timestamp = e.at
		}
		out = append(out, m)
	}
	if len(out) == 0 {
		return nil, io.EOF
	}
	return out, nil
}

func (r *reader) Position() int64 { return r.pos }
func (r *reader) End() int64      { return r.end }
func (r *reader) Close()          {}

func sortedParts(m map[int32]bool) []int32 {
	out := make([]int32, 0, len(m))
	for p, ok := range m {
		if ok {
			out = append(out, p)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i] < out[j] })
	return out
}

// describe is "start=S end=E lso=L" of topic/p.
func (b *Broker) describe(topic string, p int32) (string, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	l, err := b.log(topic, p)
	if err != nil {
		return "", err
	}
	return fmt.Sprintf("start=%d end=%d lso=%d", l.start, l.end(), l.lso()), nil
}
