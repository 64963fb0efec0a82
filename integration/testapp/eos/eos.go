// Package eos is the application of the exactly-once tests (crash and scale
// tests in integration/): a processor whose every output row and every
// state entry is a function of the input alone, so the tests can compute
// the exact expected output topic and state and compare.
//
// Input: key "k<n>", value "<seq>:<ev>" where seq counts the key's rows
// from 1 and ev is the row's event time in ms, increasing with produce
// order (so no row is ever late in a partition).
//
// Per row the processor updates
//
//	count   ValueState[int64]          rows seen
//	last    ListState[int64]           the last ListLen seqs (append; Put to trim)
//	buckets MapState[string, int64]    "b<seq%3>" → rows in that bucket
//	                                   (and the next bucket written back unchanged)
//
// and, for every seq divisible by TimerEvery, registers an event-time timer
// at ev+TimerDelay. It emits one row per input row (keyed by the key):
//
//	s=<seq> c=<count> l=<last, comma separated> b=<bucket count>
//
// so a lost or duplicated row, or state that went back or forward, shows
// in the outputs. A firing timer increments fired ValueState[int64] and
// emits "t=<expiry> f=<fired>" under the key "<key>/t": a key's timers fire
// in expiry order, so that sequence is exact too.
//
// Bad rows, for the dead-letter tests (Options.DeadLetter): a value with
// PoisonPrefix does not decode (Deserializer), and a row with FailPrefix
// ("fail/<seq>:<ev>", FailRow) makes HandleInputRows fail for its key. The
// tests give fail rows keys of their own, which get nothing else: the
// policy dead-letters all of a failing key's rows of the batch, and batch
// boundaries differ from run to run, so a key mixing good and failing rows
// would have no exact expected output.
package eos

import (
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"iter"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Shape of the processor's logic; the tests' model uses the same numbers.
const (
	ListLen    = 4
	Buckets    = 3
	TimerEvery = 5
	TimerDelay = 30 // ms of event time
)

// Names of the state variables.
const (
	VarCount   = "count"
	VarLast    = "last"
	VarBuckets = "buckets"
	VarFired   = "fired"
	VarPad     = "pad"
)

// TimerKeySuffix is appended to a key for its timer outputs.
const TimerKeySuffix = "/t"

// Row formats an input value.
func Row(seq, ev int64) string { return fmt.Sprintf("%d:%d", seq, ev) }

// Markers of the bad rows (see the package comment).
const (
	PoisonPrefix = "poison/"
	FailPrefix   = "fail/"
)

// Errors of the bad rows, found in the dead-letter records' error header.
var (
	ErrPoison = errors.New("eos: poison value")
	ErrFail   = errors.New("eos: failing row")
)

// PoisonValue formats an undecodable input value; n tells them apart.
func PoisonValue(n int64) string { return PoisonPrefix + strconv.FormatInt(n, 10) }

// FailRow formats an input value that makes its key's call fail; it has
// an event time like any row.
func FailRow(seq, ev int64) string { return FailPrefix + Row(seq, ev) }

// Deserializer is the ValueSerde: it refuses a value with PoisonPrefix and
// counts it in bad (when not nil).
type Deserializer struct{ bad *atomic.Int64 }

func (d Deserializer) Deserialize(b []byte) (string, error) {
	if strings.HasPrefix(string(b), PoisonPrefix) {
		if d.bad != nil {
			d.bad.Add(1)
		}
		return "", fmt.Errorf("%w %q", ErrPoison, b)
	}
	return string(b), nil
}

// ParseRow parses an input value.
func ParseRow(v string) (seq, ev int64, err error) {
	a, b, ok := strings.Cut(v, ":")
	if !ok {
		return 0, 0, fmt.Errorf("eos: bad row %q", v)
	}
	if seq, err = strconv.ParseInt(a, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("eos: bad row %q: %w", v, err)
	}
	if ev, err = strconv.ParseInt(b, 10, 64); err != nil {
		return 0, 0, fmt.Errorf("eos: bad row %q: %w", v, err)
	}
	return seq, ev, nil
}

// EventTime is Topology.EventTime: the row's ev (the record timestamp for an
// unparsable row, which HandleInputRows then rejects).
func EventTime(v string, recordTs int64) int64 {
	_, ev, err := ParseRow(strings.TrimPrefix(v, FailPrefix))
	if err != nil {
		return recordTs
	}
	return ev
}

// Bucket is the MapState key of seq.
func Bucket(seq int64) string { return "b" + strconv.FormatInt(seq%Buckets, 10) }

// Output formats the output row of an input row.
func Output(seq, count int64, last []int64, bucket int64) string {
	ls := make([]string, len(last))
	for i, s := range last {
		ls[i] = strconv.FormatInt(s, 10)
	}
	return fmt.Sprintf("s=%d c=%d l=%s b=%d", seq, count, strings.Join(ls, ","), bucket)
}

// TimerOutput formats the output row of a fired timer.
func TimerOutput(expiry, fired int64) string { return fmt.Sprintf("t=%d f=%d", expiry, fired) }

// Vars are the processor's state variables. Declare them on a shard (with
// shard.Shard.SetDeclaring) to read an application's state back.
type Vars struct {
	Count   state.ValueState[int64]
	Last    state.ListState[int64]
	Buckets state.MapState[string, int64]
	Fired   state.ValueState[int64]
}

// Declare declares the variables on sh (the reader's side of Init), with
// the layout the shard recorded for them (Options.Packed).
func Declare(sh *shard.Shard) (v Vars, err error) {
	vars, err := sh.Variables()
	if err != nil {
		return v, err
	}
	var opts []state.Option
	for _, vi := range vars {
		if vi.Name == VarLast && shard.IsPackedKind(vi.Kind) {
			opts = append(opts, state.Packed())
		}
	}
	if v.Count, err = shard.NewValueState(sh, VarCount, state.Int64()); err != nil {
		return v, err
	}
	if v.Last, err = shard.NewListState(sh, VarLast, state.Int64(), opts...); err != nil {
		return v, err
	}
	if v.Buckets, err = shard.NewMapState(sh, VarBuckets, state.String(), state.Int64(), opts...); err != nil {
		return v, err
	}
	v.Fired, err = shard.NewValueState(sh, VarFired, state.Int64())
	return v, err
}

// Pad is the value of the pad variable after the row seq of key: size
// bytes of hex digits of a generator seeded by both, so that no two values
// share much and compression cannot shrink them.
func Pad(key string, seq int64, size int) string {
	h := fnv.New64a()
	h.Write([]byte(key))
	rng := rand.New(rand.NewPCG(h.Sum64(), uint64(seq)))
	const digits = "0123456789abcdef"
	b := make([]byte, size)
	for i := range b {
		b[i] = digits[rng.IntN(len(digits))]
	}
	return string(b)
}

// Processor is the exactly-once test processor (EventTime mode).
type Processor struct {
	h      processor.Handle
	v      Vars
	bad    *atomic.Int64 // counts the rows of failed calls; nil: not counted
	pad    int           // bytes of the pad variable; 0: no pad variable
	padVar state.ValueState[string]
	slow   time.Duration // Options.Slow
	packed bool          // Options.Packed
}

// slowRow reports whether HandleInputRows sleeps Options.Slow for row:
// about one row in seven, by a hash of the row.
func slowRow(row string) bool {
	h := fnv.New32a()
	h.Write([]byte(row))
	return h.Sum32()%7 == 0
}

// New is a processor factory.
func New() processor.StatefulProcessor[string, string, string] { return &Processor{} }

// NewCounting returns a processor factory whose processors count in bad
// the rows of every call that fails on a fail row (all of them are
// dead-lettered under ProcessingErrorDeadLetter).
func NewCounting(bad *atomic.Int64) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Processor{bad: bad} }
}

// NewPadded is a processor factory for processors that also keep, per key,
// a pad variable of size bytes (Pad(key, seq, size) after row seq), to make
// the state large (full-disk tests). The pad is not part of the outputs.
func NewPadded(size int) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] { return &Processor{pad: size} }
}

func (p *Processor) Init(h processor.Handle) (err error) {
	p.h = h
	if p.v.Count, err = processor.NewValueState(h, VarCount, state.Int64()); err != nil {
		return err
	}
	var opts []state.Option
	if p.packed {
		opts = append(opts, state.Packed())
	}
	if p.v.Last, err = processor.NewListState(h, VarLast, state.Int64(), opts...); err != nil {
		return err
	}
	if p.v.Buckets, err = processor.NewMapState(h, VarBuckets, state.String(), state.Int64(), opts...); err != nil {
		return err
	}
	if p.v.Fired, err = processor.NewValueState(h, VarFired, state.Int64()); err != nil {
		return err
	}
	if p.pad > 0 {
		p.padVar, err = processor.NewValueState(h, VarPad, state.String())
	}
	return err
}

func (p *Processor) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := p.v.Count.Get()
	if err != nil {
		return err
	}
	for row := range rows {
		if p.slow > 0 && slowRow(row) {
			time.Sleep(p.slow)
		}
		if strings.HasPrefix(row, FailPrefix) {
			// Change state and emit first, so that the call has something
			// to discard.
			if err := p.v.Count.Update(n + 1); err != nil {
				return err
			}
			if err := out.Emit("doomed " + row); err != nil {
				return err
			}
			return p.fail(key, row, rows)
		}
		seq, ev, err := ParseRow(row)
		if err != nil {
			return err
		}
		n++
		if err := p.v.Count.Update(n); err != nil {
			return err
		}
		if err := p.v.Last.AppendValue(seq); err != nil {
			return err
		}
		all, err := p.v.Last.Get()
		if err != nil {
			return err
		}
		last := slices.Collect(all)
		if len(last) > ListLen {
			last = last[len(last)-ListLen:]
			if err := p.v.Last.Put(last); err != nil {
				return err
			}
		}
		b := Bucket(seq)
		bn, _, err := p.v.Buckets.GetValue(b)
		if err != nil {
			return err
		}
		bn++
		if err := p.v.Buckets.UpdateValue(b, bn); err != nil {
			return err
		}
		// The next seq's bucket written back unchanged (a processor that
		// rewrites every field of an aggregate, changed or not): the
		// shard stages nothing for it, and the state stays the model's.
		nb := Bucket(seq + 1)
		if nv, ok, err := p.v.Buckets.GetValue(nb); err != nil {
			return err
		} else if ok {
			if err := p.v.Buckets.UpdateValue(nb, nv); err != nil {
				return err
			}
		}
		if p.pad > 0 {
			if err := p.padVar.Update(Pad(key, seq, p.pad)); err != nil {
				return err
			}
		}
		if seq%TimerEvery == 0 {
			if err := p.h.RegisterTimer(ev + TimerDelay); err != nil {
				return err
			}
		}
		if err := out.Emit(Output(seq, n, last, bn)); err != nil {
			return err
		}
	}
	return nil
}

// fail returns the error of a fail row, after counting the call's rows.
func (p *Processor) fail(key, row string, rows iter.Seq[string]) error {
	if p.bad != nil {
		n := int64(0)
		for range rows {
			n++
		}
		p.bad.Add(n)
	}
	return fmt.Errorf("%w %q of key %s", ErrFail, row, key)
}

func (p *Processor) HandleExpiredTimer(key string, _ processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	f, _, err := p.v.Fired.Get()
	if err != nil {
		return err
	}
	f++
	if err := p.v.Fired.Update(f); err != nil {
		return err
	}
	return out.Emit(TimerOutput(t.ExpiryTimeMs, f))
}

func (p *Processor) Close() error { return nil }

// OutputKey is Topology.Output.Key: timer outputs go to "<key>/t".
func OutputKey(key, out string) []byte {
	if strings.HasPrefix(out, "t=") {
		return []byte(key + TimerKeySuffix)
	}
	return []byte(key)
}

// Options are the settings of one instance of the application.
type Options struct {
	Brokers       []string
	ApplicationID string
	InstanceID    string
	StateDir      string
	Input, Output string
	// Input2, when set, is a second input topic (Topology.Inputs) whose
	// values are the rows as JSON ({"row": "<row>"}, Row2); the event time
	// then has AllowedLateness Lateness2, so that rows of one topic
	// consumed after later rows of the other are not late. "": one input.
	Input2          string
	MaxBatchRecords int           // 0: kstate's default
	SessionTimeout  time.Duration // 0: kstate's default
	// TransactionTimeout is Kafka.TransactionTimeout; 0: kstate's default.
	TransactionTimeout time.Duration
	Pad                int // bytes of a pad variable per key (NewPadded); 0: none
	Logger             *slog.Logger
	// DeadLetter turns the DeadLetter policies on (OnDecodeError,
	// OnProcessingError): poison values and the rows of failing calls go
	// to "<ApplicationID>-dlq" instead of stopping Run.
	DeadLetter bool
	// BadRows, when not nil, counts the records this instance
	// dead-letters: each poison value decoded, each row of a failed call.
	BadRows *atomic.Int64
	// Slow, when positive, makes HandleInputRows sleep this long for
	// about one row in seven (by a hash of the row): a batch's tasks then
	// finish at different times, so that some tasks' records are produced
	// while others still run (crash_overlap_test.go). Outputs and state
	// are the same.
	Slow time.Duration
	// Packed declares the list and the map with state.Packed: one stored
	// value per key each. Outputs and state are the same.
	Packed bool
	// NoCache turns the committed-state cache off (CacheBytes -1): every
	// read of the state goes past it, so that batches of 32 keys or more
	// are read ahead (shard.Prefetch).
	NoCache bool
	// WriteBehindBytes is Options.State.WriteBehindBytes (0: the default).
	// A small one fills the write-behind layer every batch or two, so that
	// layers are frozen and written in the background all the time.
	WriteBehindBytes int64
}

// Config is the application's kstate topology and options; child processes
// (integration/testapp -proc eos) and in-process instances use the same.
func Config(o Options) (kstate.Topology[string, string, string], kstate.Options) {
	newProc := New
	if o.Pad > 0 {
		newProc = NewPadded(o.Pad)
	}
	cfg := kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), o.Input),
		KeySerde:     serde.String(),
		NewProcessor: newProc,
		TimeMode:     processor.EventTime,
		EventTime:    EventTime,
		Output: kstate.Output[string, string]{
			Topic: o.Output,
			Serde: serde.String(),
			Key:   OutputKey,
		},
	}
	opts := kstate.Options{
		ApplicationID: o.ApplicationID,
		InstanceID:    o.InstanceID,
		Kafka: kstate.KafkaOptions{
			Brokers:            o.Brokers,
			SessionTimeout:     o.SessionTimeout,
			TransactionTimeout: o.TransactionTimeout,
		},
		State: kstate.StateOptions{
			Dir: o.StateDir,
			// A small committed-state cache, so that every crash test also
			// proves the cache exact under kills (evicting all the time).
			CacheBytes: 256 << 10,
			// A small write-behind budget, so that the crash tests kill
			// shards both with committed batches still in memory (restored
			// from the changelog) and right after their flush, and a full
			// disk shows at a local commit.
			WriteBehindBytes: 64 << 10,
		},
		Batching: kstate.BatchingOptions{
			MaxRecords: o.MaxBatchRecords,
			MaxWait:    100 * time.Millisecond,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 10 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: o.Logger,
		},
	}
	if o.Pad > 0 {
		// The full-disk test (the only user of Pad) fills a small tmpfs
		// with the pad's writes: write-through, so that every local commit
		// writes its batch (write-behind coalesces them into far fewer
		// bytes; its failed write is shard's TestWriteBehindFlushFailure).
		opts.State.WriteBehindBytes = -1
	}
	if o.Input2 != "" {
		cfg.Inputs = []kstate.Input[string]{
			{Topic: o.Input, ValueSerde: serde.String()},
			{Topic: o.Input2, ValueSerde: row2Serde{}},
		}
		cfg.AllowedLateness = Lateness2
	}
	if o.DeadLetter {
		cfg.Inputs[0].ValueSerde = Deserializer{bad: o.BadRows}
		cfg.NewProcessor = NewCounting(o.BadRows)
		cfg.OnDecodeError = kstate.DecodeErrorDeadLetter
		cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
	}
	if o.NoCache {
		opts.State.CacheBytes = -1
	}
	if o.WriteBehindBytes != 0 {
		opts.State.WriteBehindBytes = o.WriteBehindBytes
	}
	if o.Slow > 0 || o.Packed {
		inner := cfg.NewProcessor
		cfg.NewProcessor = func() processor.StatefulProcessor[string, string, string] {
			p := inner().(*Processor)
			p.slow, p.packed = o.Slow, o.Packed
			return p
		}
	}
	return cfg, opts
}

// Lateness2 is the AllowedLateness with two input topics: far more event
// time than the test's rows span, so no row is late whichever topic is
// consumed first, and timers fire at the watermark max event time −
// Lateness2.
const Lateness2 = 100 * time.Second

// Row2 is a row as written to the second input topic: JSON.
func Row2(row string) string {
	b, _ := json.Marshal(map[string]string{"row": row})
	return string(b)
}

// row2Serde decodes Row2 values.
type row2Serde struct{}

func (row2Serde) Deserialize(b []byte) (string, error) {
	var m struct{ Row *string }
	if err := json.Unmarshal(b, &m); err != nil || m.Row == nil {
		return "", fmt.Errorf("eos: not a {\"row\": ...} value: %q", b)
	}
	return *m.Row, nil
}
