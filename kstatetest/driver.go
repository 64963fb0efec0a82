package kstatetest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/engine/enginetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// defaultStart is the driver clock's default start (see StartTime).
var defaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// ErrNoTopic is returned when Topology.InitialState reads a topic the driver
// was not given with InitialTopic.
var ErrNoTopic = errors.New("kstatetest: initial state topic not given")

// Option configures New.
type Option func(*options)

type options struct {
	partitions int
	start      time.Time
	topics     map[string][]Record
	appID      string
	logger     *slog.Logger
	maxBatch   time.Duration
}

// Partitions sets the number of input partitions (one engine task and one
// state shard each), overriding the default of 1. Input records are routed
// like Kafka's default partitioner routes them: murmur2 of the key bytes.
func Partitions(n int) Option { return func(o *options) { o.partitions = n } }

// ApplicationID sets the application id the driver runs the topology
// under (kstate.Options.ApplicationID: the changelog, repartition and
// dead-letter topic names derive from it), overriding the default
// "kstatetest".
func ApplicationID(id string) Option { return func(o *options) { o.appID = id } }

// Logger sets the logger of the engine's messages (kstate.Options'
// Observability.Logger), overriding the default: the test's own output at
// Warn and above, shown when the test fails.
func Logger(l *slog.Logger) Option { return func(o *options) { o.logger = l } }

// StartTime sets the driver clock's start, overriding the default of
// 2026-01-01T00:00:00Z (a fixed instant, so that tests are deterministic).
func StartTime(t time.Time) Option { return func(o *options) { o.start = t } }

// Record is a raw Kafka record (key and value bytes).
type Record struct{ Key, Value []byte }

// InitialTopic gives the records of a topic that Topology.InitialState reads
// (kstate.InitialStateFromTopic), since the driver has no Kafka. Without
// it, such an initial state makes New fail with ErrNoTopic.
func InitialTopic(topic string, records ...Record) Option {
	return func(o *options) { o.topics[topic] = append(o.topics[topic], records...) }
}

// Output is one committed output record.
type Output[O any] struct {
	// Key is the record key: Topology.Output.Key's, or the grouping key's bytes.
	Key []byte
	// Value is the row the processor emitted (the typed value handed to
	// Topology.Output.Serde, not a decoding of its bytes; of two rows that
	// serialize to the same bytes, the later one).
	Value O
	// Bytes is Value as Topology.Output.Serde serialized it: the record value.
	Bytes []byte
	// Timestamp is the record timestamp: processor.EmitWith's, else
	// Topology.Output.EventTime of the row; zero when neither sets one.
	Timestamp time.Time
	// Headers are the record headers (processor.EmitWith); nil: none.
	Headers []processor.Header
	// Partition is the output topic's partition the record went to, which
	// has as many partitions as the input: murmur2 of Key, like Kafka's
	// default partitioner (the input partition when Key is the input key).
	Partition int32
}

// TopicOutput is one committed record emitted with processor.EmitTo to a
// topic of Topology.Output.EmitTo.
type TopicOutput struct {
	Key, Value []byte
	Timestamp  time.Time // zero when processor.OutputMeta set none
	Headers    []processor.Header
	// Partition is the topic's partition (as Output.Partition).
	Partition int32
}

// Driver runs an application's kstate.Topology on the engine's coordinator —
// the App built by kstate.New, run by the same code as kstate.App.Run —
// over an in-memory Kafka (topics, transactions, a consumer group) and
// in-memory state shards, deterministically: each call returns once the
// application is idle, nothing sleeps, and time is the driver's clock,
// moved by AdvanceClock.
//
// A Driver is used by one goroutine (the test's). It is closed by
// t.Cleanup.
type Driver[K, I, O any] struct {
	t      testing.TB
	top    kstate.Topology[K, I, O]
	appID  string
	opts   options
	log    *slog.Logger
	valSer serde.Serializer[I] // nil when ValueSerde is not a Serde
	clock  *enginetest.Clock
	broker *enginetest.Broker
	topics []string // the engine's input topics (the repartition topic last)
	// changelog is the changelog topic.
	changelog string
	// capture keeps the typed value of every serialized output row.
	capture *capture[O]
	queued  []queued
	insts   []*instance[K, I, O]
	owner   []int // partition → index in insts
	// cursors: per topic read by Outputs, TopicOutputs and DeadLetters,
	// the next offset per partition.
	cursors map[string][]int64
	outputs []Output[O]
	topicOf map[string][]TopicOutput // processor.EmitTo's outputs, by topic
	dead    []DeadLetter
	closed  bool
	retired kstate.Counters // counters of the Runs that ended
	faults  faults[K, O]
	kill    killSwitch
	stuck   *stuckFault
	// stuckErr: the engine did not give a stuck batch up (wait).
	stuckErr error
}

// queued is an input record not yet handed to the in-memory broker.
type queued struct {
	topic string
	part  int32
	msg   engine.Message
}

// New returns a Driver running top, the Topology the application ships
// with. It needs no kstate.Options: the driver has no Kafka, no state
// directory and its own clock; ApplicationID and Logger set what it does
// use. Without Output.Topic and Sinks, the driver writes to a placeholder
// topic "output". The topology is validated and defaulted by kstate.New, and
// a config error fails the test. The application runs and its partitions
// are restored (processors' Init has run) when New returns.
func New[K, I, O any](t testing.TB, top kstate.Topology[K, I, O], opts ...Option) *Driver[K, I, O] {
	t.Helper()
	o := options{partitions: 1, start: defaultStart, topics: map[string][]Record{}, appID: "kstatetest"}
	for _, opt := range opts {
		opt(&o)
	}
	if o.partitions < 1 {
		t.Fatalf("kstatetest: Partitions(%d): want at least 1", o.partitions)
	}
	if o.logger == nil {
		// The test's own log: quiet when the test passes.
		o.logger = slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	if top.Output.Topic == "" && len(top.Output.Sinks) == 0 {
		top.Output.Topic = "output"
	}
	d := &Driver[K, I, O]{t: t, opts: o, appID: o.appID, clock: enginetest.NewClock(o.start), cursors: map[string][]int64{}, stuck: newStuckFault()}
	d.log = slog.New(orphanWatch{Handler: o.logger.Handler(), orphans: d.stuck.orphans})
	top.NewProcessor = wrapProcessor(top.NewProcessor, d.stuck, top.KeySerde)
	if top.InitialState != nil {
		top.InitialState = initialSource[K]{top.InitialState}
	}
	if top.Output.Serde != nil {
		d.capture = &capture[O]{s: top.Output.Serde, vals: map[string]O{}}
		top.Output.Serde = d.capture
	}
	if len(top.Output.Sinks) > 0 {
		top.Output.Sinks = append([]kstate.Sink[K, O]{d.faults.sink(top.Output.Sinks[0])}, top.Output.Sinks[1:]...)
	}
	d.top = top
	app, err := d.newApp(nil)
	if err != nil {
		t.Fatalf("%v", err)
	}
	if len(top.Inputs) > 0 {
		d.valSer, _ = top.Inputs[0].ValueSerde.(serde.Serializer[I])
	}
	d.topics = inputTopics(top)
	d.changelog = app.ChangelogTopic()
	topics := map[string]int{}
	for _, name := range d.topics {
		topics[name] = o.partitions
	}
	if len(top.GroupBy) > 0 {
		d.topics = append(d.topics, app.RepartitionTopic())
	}
	if top.Output.Topic != "" {
		topics[top.Output.Topic] = o.partitions
	}
	for _, ot := range top.Output.EmitTo {
		topics[ot.Name()] = o.partitions
	}
	d.broker = enginetest.NewBroker(o.appID, d.topics[0], topics)
	d.broker.SetInputs(d.topics...)
	d.owner = make([]int, o.partitions)
	t.Cleanup(d.Close)
	in := d.newInstance(0)
	// The instance runs an App of its own (launch builds it), whose sinks
	// die with it; app above gave the topic names.
	if err := d.launch(in, nil, d.allParts()); err != nil {
		t.Fatalf("%v", err)
	}
	return d
}

// allParts lists every partition.
func (d *Driver[K, I, O]) allParts() []int32 {
	out := make([]int32, len(d.owner))
	for i := range out {
		out[i] = int32(i)
	}
	return out
}

// Now is the driver clock: the processing time of the next batch.
func (d *Driver[K, I, O]) Now() time.Time { return d.clock.Now() }

// AdvanceClock moves the driver clock forward by dur. No batch runs: call
// RunBatch to let due processing-time timers fire and TTL expire.
func (d *Driver[K, I, O]) AdvanceClock(dur time.Duration) {
	d.t.Helper()
	if dur < 0 {
		d.t.Fatalf("kstatetest: AdvanceClock(%v): the clock never goes back", dur)
	}
	d.clock.Advance(dur)
}

// Input queues a record with the driver clock as its timestamp.
func (d *Driver[K, I, O]) Input(key K, value I) {
	d.t.Helper()
	d.InputAt(key, value, d.Now())
}

// InputAt queues a record with timestamp ts (the event time in EventTime
// mode unless Topology.EventTime says otherwise). The key is encoded with
// Topology.KeySerde and the value with the input's ValueSerde, which must then be
// a serde.Serde (use InputRecord otherwise).
func (d *Driver[K, I, O]) InputAt(key K, value I, ts time.Time) {
	d.t.Helper()
	kb, err := d.top.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: Input: serialize key %#v: %v", key, err)
	}
	if d.valSer == nil {
		d.t.Fatalf("kstatetest: Input: Topology.Inputs[0].ValueSerde (%T) cannot serialize; use InputRecord with the value's bytes", d.top.Inputs[0].ValueSerde)
	}
	vb, err := d.valSer.Serialize(value)
	if err != nil {
		d.t.Fatalf("kstatetest: Input: serialize value %#v: %v", value, err)
	}
	d.InputRecord(kb, vb, ts)
}

// InputRecord queues a record of raw bytes with timestamp ts and headers
// (seen by Input.ValueFromRecord), e.g. one that Topology.KeySerde or
// ValueSerde cannot decode. It goes to the partition
// murmur2(key) selects, like Kafka's default partitioner; a nil key (which
// Topology.OnDecodeError handles) goes to partition 0.
func (d *Driver[K, I, O]) InputRecord(key, value []byte, ts time.Time, headers ...processor.Header) {
	d.inputRecord(0, key, value, ts, headers)
}

func (d *Driver[K, I, O]) inputRecord(input int, key, value []byte, ts time.Time, headers []processor.Header) {
	p := int32(0)
	if key != nil {
		p = engine.PartitionFor(key, len(d.owner))
	}
	d.queued = append(d.queued, queued{topic: d.topics[input], part: p,
		msg: engine.Message{Key: key, Value: value, Timestamp: ts, Headers: slices.Clone(headers)}})
}

// RunBatch hands the queued input to the in-memory Kafka and returns once
// the application has run one micro-batch over it, at the driver clock,
// and committed it (a Kafka transaction: outputs become visible to
// Outputs, state changes go to the changelog and the shards) or failed.
// In ProcessingTime mode the batch also runs the partitions without input
// once the clock has moved (timers fire, TTL expires), as the engine's
// trigger does; in EventTime mode those whose watermark advanced.
//
// On error nothing of the batch is committed, and the error is what
// kstate.App.Run returns: match kstate.UserError, DecodeError, ModeError,
// SinkError, StuckError, RecordTooLargeError, ErrFenced ... with errors.As
// and errors.Is. The application then restarts on its local state, as an
// orchestrator would restart the process, and the next RunBatch redoes the
// batch — except when the error is the records' or the processor's
// (UserError, DecodeError, RecordTooLargeError): their input is dropped,
// as `kstate skip` would, since it would fail again. After Crash, RunBatch
// fails with ErrCrashed until Restart.
//
// With Topology.GroupBy, a batch forwards the records of GroupBy inputs to
// the repartition topic (to the partition of their new key) and the NEXT
// batch processes them, as on Kafka: run two batches.
func (d *Driver[K, I, O]) RunBatch() error {
	if d.closed {
		return errors.New("kstatetest: RunBatch on a closed Driver")
	}
	for _, q := range d.queued {
		if err := d.broker.Append(q.topic, q.part, q.msg); err != nil {
			return fmt.Errorf("kstatetest: internal error: %v", err)
		}
	}
	d.queued = nil
	var first error
	ran := false
	for _, in := range d.insts {
		if in.dead() {
			if in.crashed.Load() {
				first = cmp(first, fmt.Errorf("kstatetest: instance %s crashed: call Restart: %w", in.name, ErrCrashed))
			}
			continue
		}
		ran = true
		first = cmp(first, d.batch(in))
	}
	if !ran && first == nil {
		first = errors.New("kstatetest: the application is not running (its start failed): call Restart")
	}
	// A call StuckNextCall blocked: released once its Run returned (and
	// the instance restarted on a copy of its disks).
	first = cmp(d.stuckErr, cmp(d.stuck.release(), first))
	d.stuckErr = nil
	d.collect()
	return first
}

// cmp keeps the first error.
func cmp(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// MustRunBatch is RunBatch failing the test on error.
func (d *Driver[K, I, O]) MustRunBatch() {
	d.t.Helper()
	if err := d.RunBatch(); err != nil {
		d.t.Fatalf("RunBatch: %v", err)
	}
}

// Outputs returns the outputs committed since the last call to Outputs or
// OutputValues, in commit order (batch by batch; within a batch by output
// partition, then in emission order).
func (d *Driver[K, I, O]) Outputs() []Output[O] {
	out := d.outputs
	d.outputs = nil
	return out
}

// TopicOutputs returns the records committed to topic (one of
// Topology.Output.EmitTo, written with processor.EmitTo) since the last call
// for that topic, in commit order.
func (d *Driver[K, I, O]) TopicOutputs(topic string) []TopicOutput {
	out := d.topicOf[topic]
	delete(d.topicOf, topic)
	return out
}

// DeadLetter is one committed record of the dead-letter topic
// (Topology.OnDecodeError, OnKeyPartitionMismatch, OnProcessingError).
type DeadLetter struct {
	Key, Value []byte
	// Timestamp is the original record's (a failed timer's expiry).
	Timestamp time.Time
	// Headers are the kstate.* headers (kstate.HeaderStage, ...).
	Headers map[string]string
	// Partition is the input partition whose batch wrote it.
	Partition int32
}

// DeadLetters returns the dead-letter records committed since the last
// call, in commit order.
func (d *Driver[K, I, O]) DeadLetters() []DeadLetter {
	out := d.dead
	d.dead = nil
	return out
}

// OutputValues is Outputs without the record details.
func (d *Driver[K, I, O]) OutputValues() []O {
	var out []O
	for _, o := range d.Outputs() {
		out = append(out, o.Value)
	}
	return out
}

// collect reads what was committed to the output, output and dead-letter
// topics since the last collect.
func (d *Driver[K, I, O]) collect() {
	if d.top.Output.Topic != "" {
		for _, m := range d.readTopicRecords(d.top.Output.Topic) {
			var v O
			if d.capture != nil {
				v = d.capture.value(m.Value)
			}
			d.outputs = append(d.outputs, Output[O]{Key: m.Key, Value: v, Bytes: m.Value, Timestamp: m.Timestamp,
				Headers: procHeaders(m.Headers), Partition: m.Partition})
		}
	}
	for _, ot := range d.top.Output.EmitTo {
		for _, m := range d.readTopicRecords(ot.Name()) {
			if d.topicOf == nil {
				d.topicOf = map[string][]TopicOutput{}
			}
			d.topicOf[ot.Name()] = append(d.topicOf[ot.Name()], TopicOutput{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp,
				Headers: procHeaders(m.Headers), Partition: m.Partition})
		}
	}
	if dlq := d.deadLetterTopic(); dlq != "" {
		for _, m := range d.readTopicRecords(dlq) {
			h := make(map[string]string, len(m.Headers))
			for _, x := range m.Headers {
				h[x.Key] = string(x.Value)
			}
			d.dead = append(d.dead, DeadLetter{Key: m.Key, Value: m.Value, Timestamp: m.Timestamp, Headers: h, Partition: m.Partition})
		}
	}
	if d.capture != nil {
		d.capture.reset()
	}
}

// deadLetterTopic is the topic the policies dead-letter to; "" if none.
func (d *Driver[K, I, O]) deadLetterTopic() string {
	c := d.top
	if c.OnDecodeError == kstate.DecodeErrorDeadLetter || c.OnKeyPartitionMismatch == kstate.KeyPartitionDeadLetter ||
		c.OnProcessingError == kstate.ProcessingErrorDeadLetter {
		if c.DeadLetterTopic != "" {
			return c.DeadLetterTopic
		}
		return d.appID + "-dlq"
	}
	return ""
}

// read returns topic's records committed since the last read, partition
// by partition.
func (d *Driver[K, I, O]) readTopicRecords(topic string) []engine.Message {
	cur := d.cursors[topic]
	if cur == nil {
		cur = make([]int64, len(d.owner))
		d.cursors[topic] = cur
	}
	var out []engine.Message
	for p := range cur {
		var ms []engine.Message
		ms, cur[p] = d.broker.ReadCommittedFrom(topic, int32(p), cur[p])
		out = append(out, ms...)
	}
	return out
}

// capture wraps Topology.Output.Serde so that the driver keeps the typed
// value of every row the engine serialized (batch tasks run in parallel).
type capture[O any] struct {
	s    serde.Serializer[O]
	mu   sync.Mutex
	vals map[string]O
}

func (c *capture[O]) Serialize(o O) ([]byte, error) {
	b, err := c.s.Serialize(o)
	if err == nil {
		c.mu.Lock()
		c.vals[string(b)] = o
		c.mu.Unlock()
	}
	return b, err
}

func (c *capture[O]) value(b []byte) O {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.vals[string(b)]
}

func (c *capture[O]) reset() {
	c.mu.Lock()
	clear(c.vals)
	c.mu.Unlock()
}

// procHeaders copies a record's headers for the test; none is nil.
func procHeaders(hs []processor.Header) []processor.Header {
	if len(hs) == 0 {
		return nil
	}
	return slices.Clone(hs)
}

// RestartOption configures Restart.
type RestartOption func(*restartOptions)

type restartOptions struct{ keepLocal bool }

// KeepLocalState keeps the shards' contents across Restart, like a restart
// on the same disk: only the changelog tail after the shard's offset is
// restored. By default the shards are thrown away and restored in full.
func KeepLocalState() RestartOption { return func(o *restartOptions) { o.keepLocal = true } }

// Restart stops the application (gracefully: the processors' Close runs;
// after Crash, there is nothing left to stop) and runs it again, as a new
// kstate.App on the same Topology: new in-memory shards are restored from
// the changelog through the engine's restore path, and the processors'
// Init runs again. Initial state is not applied again. Input committed by
// no batch (queued, or of a batch that failed or crashed) is processed by
// the next RunBatch. An error fails the test; RestartError returns it
// instead.
func (d *Driver[K, I, O]) Restart(opts ...RestartOption) {
	d.t.Helper()
	if err := d.RestartError(opts...); err != nil {
		d.t.Fatalf("Restart: %v", err)
	}
}

// RestartError is Restart returning the error that makes kstate.App.Run
// fail at start-up — an Init that fails, such as a state variable
// declared with an incompatible schema (*state.SchemaChangeError) —
// instead of failing the test. After an error the application is not
// running: call Restart again (with a processor that starts) before
// RunBatch.
func (d *Driver[K, I, O]) RestartError(opts ...RestartOption) error {
	d.t.Helper()
	var o restartOptions
	for _, opt := range opts {
		opt(&o)
	}
	if d.closed {
		return errors.New("kstatetest: Restart of a closed Driver")
	}
	var first error
	for i, in := range d.insts {
		if err := d.stop(in); err != nil {
			first = cmp(first, err)
		}
		next := d.newInstanceFrom(i, in, o.keepLocal)
		first = cmp(first, d.launch(next, nil, d.ownedBy(i)))
	}
	d.collect()
	return first
}

// ownedBy lists the partitions of instance i.
func (d *Driver[K, I, O]) ownedBy(i int) []int32 {
	var out []int32
	for p, o := range d.owner {
		if o == i {
			out = append(out, int32(p))
		}
	}
	return out
}

// Counters returns the engine counters summed over every partition and
// every restart (rows in/out, late rows dropped, timers fired, TTL
// removals, restored records, ...).
func (d *Driver[K, I, O]) Counters() kstate.Counters { return d.Metrics().Total }

// Metrics returns a snapshot like kstate.App.Metrics, over the running
// instances; Total also counts the Runs that ended (Restart, a failed
// batch, Rebalance's second instance).
func (d *Driver[K, I, O]) Metrics() kstate.Metrics {
	m := kstate.Metrics{Partitions: map[int32]kstate.Counters{}, Total: d.retired}
	for _, in := range d.insts {
		if in.app == nil || in.dead() {
			continue
		}
		am := in.app.Metrics()
		m.Total = addCounters(m.Total, am.Total)
		for p, c := range am.Partitions {
			m.Partitions[p] = c
		}
		m.Assigned = append(m.Assigned, am.Assigned...)
		m.Restoring = append(m.Restoring, am.Restoring...)
	}
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	sort.Slice(m.Restoring, func(i, j int) bool { return m.Restoring[i] < m.Restoring[j] })
	return m
}

// addCounters is a + b, field by field (every field of Counters is a
// count or a duration: an int64 kind).
func addCounters(a, b kstate.Counters) kstate.Counters {
	va, vb := reflect.ValueOf(&a).Elem(), reflect.ValueOf(b)
	for i := range va.NumField() {
		va.Field(i).SetInt(va.Field(i).Int() + vb.Field(i).Int())
	}
	return a
}

// newApp builds the application as kstate.New does for a user, with the
// few options the driver runs it under: its application id, logger and
// clock, and a placeholder broker (the driver's Kafka is in memory). The
// sinks of in's App stop with in: once a crash killed it (Crash), a sink
// call returns ErrCrashed without calling the user's sink, as a killed
// process calls nothing more. in nil: no guard (the App only names topics).
func (d *Driver[K, I, O]) newApp(in *instance[K, I, O]) (*kstate.App[K, I, O], error) {
	top := d.top
	if in != nil && len(top.Output.Sinks) > 0 {
		sinks := make([]kstate.Sink[K, O], len(top.Output.Sinks))
		for i, s := range top.Output.Sinks {
			sinks[i] = kstate.SinkFunc[K, O](func(ctx context.Context, b kstate.SinkBatch[K, O]) error {
				if in.crashed.Load() {
					return fmt.Errorf("kstatetest: sink called after the crash: %w", ErrCrashed)
				}
				return s.WriteBatch(ctx, b)
			})
		}
		top.Output.Sinks = sinks
	}
	return kstate.New(top, kstate.Options{
		ApplicationID: d.appID,
		Kafka:         kstate.KafkaOptions{Brokers: []string{"kstatetest:9092"}},
		Observability: kstate.ObservabilityOptions{Logger: d.log, Clock: d.clock.Now},
		Batching:      kstate.BatchingOptions{MaxDuration: d.opts.maxBatch},
	})
}

// Partition returns the input partition of key.
func (d *Driver[K, I, O]) Partition(key K) int32 {
	d.t.Helper()
	return int32(d.partitionOf(key))
}

func (d *Driver[K, I, O]) partitionOf(key K) int {
	d.t.Helper()
	kb, err := d.top.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: serialize key %#v: %v", key, err)
	}
	return int(engine.PartitionFor(kb, len(d.owner)))
}

// Close stops the application (the processors' Close runs); an error fails
// the test. It is idempotent, and registered with t.Cleanup by New.
func (d *Driver[K, I, O]) Close() {
	if d.closed {
		return
	}
	d.closed = true
	d.stuck.releaseAll() // a call still blocked would hold the shutdown
	defer func() {
		if err := d.stuck.release(); err != nil {
			d.t.Errorf("%v", err)
		}
	}()
	for _, in := range d.insts {
		if err := d.stop(in); err != nil {
			d.t.Errorf("kstatetest: Close: %v", err)
		}
	}
}

// InputTo queues a record of input topic topic (one of Topology.Inputs or
// InputTopics) with the driver clock as its timestamp: the key is encoded
// with Topology.KeySerde and the value with the topic's ValueSerde, which
// must then be a serde.Serde (use InputRecordTo otherwise). The records of
// every input topic reach the processor together, as partition p of every
// input topic feeds partition task p: in a batch, by topic (the order of
// the inputs), then in the order they were queued.
func (d *Driver[K, I, O]) InputTo(topic string, key K, value I) {
	d.t.Helper()
	i, in := d.input(topic)
	kb, err := d.top.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: InputTo(%q): serialize key %#v: %v", topic, key, err)
	}
	ser, ok := in.ValueSerde.(serde.Serializer[I])
	if !ok {
		d.t.Fatalf("kstatetest: InputTo(%q): the topic's ValueSerde (%T) cannot serialize; use InputRecordTo with the value's bytes", topic, in.ValueSerde)
	}
	vb, err := ser.Serialize(value)
	if err != nil {
		d.t.Fatalf("kstatetest: InputTo(%q): serialize value %#v: %v", topic, value, err)
	}
	d.inputRecord(i, kb, vb, d.Now(), nil)
}

// InputRecordTo queues a record of raw bytes of input topic topic, as
// InputRecord does for the first input topic; the topic's decoder
// (Input.ValueSerde or Input.ValueFromRecord) decodes it.
func (d *Driver[K, I, O]) InputRecordTo(topic string, key, value []byte, ts time.Time, headers ...processor.Header) {
	d.t.Helper()
	i, _ := d.input(topic)
	d.inputRecord(i, key, value, ts, headers)
}

// input returns the index and the decoders of an input topic; an unknown
// topic fails the test.
func (d *Driver[K, I, O]) input(topic string) (int, kstate.Input[I]) {
	d.t.Helper()
	topics := inputTopics(d.top)
	for i, t := range topics {
		if t == topic {
			return i, d.top.Inputs[i]
		}
	}
	d.t.Fatalf("kstatetest: input topic %q is not one of the application's %q", topic, topics)
	return 0, kstate.Input[I]{}
}

// inputTopics returns the input topics, Topology.Inputs'.
func inputTopics[K, I, O any](t kstate.Topology[K, I, O]) []string {
	out := make([]string, len(t.Inputs))
	for i, in := range t.Inputs {
		out[i] = in.Topic
	}
	return out
}
