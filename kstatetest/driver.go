package kstatetest

import (
	"fmt"
	"log/slog"
	"sort"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/publicapi"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// defaultStart is the driver clock's default start (see StartTime).
var defaultStart = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// Option configures New.
type Option func(*options)

type options struct {
	partitions int
	start      time.Time
	topics     map[string][]Record
	appID      string
	logger     *slog.Logger
}

// defaultApplicationID is the driver's application id without the
// ApplicationID option.
const defaultApplicationID = "kstatetest"

// Partitions sets the number of input partitions (one engine task and one
// state shard each), overriding the default of 1. Input records are routed
// like Kafka's default partitioner routes them: murmur2 of the key bytes.
func Partitions(n int) Option { return func(o *options) { o.partitions = n } }

// ApplicationID sets the application id (kstate.Options.ApplicationID)
// the driver runs under, overriding the default of "kstatetest": it names
// the repartition topic of Topology.GroupBy and is the
// kstate.HeaderApplication of dead-letter records.
func ApplicationID(id string) Option { return func(o *options) { o.appID = id } }

// Logger sets the logger of the engine's messages (kstate.Options'
// Observability.Logger), overriding the default: the test's own output
// (t.Output()), shown only when the test fails.
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
	// Topology.Output.Serde, not a decoding of its bytes).
	Value O
	// Bytes is Value as Topology.Output.Serde serialized it: the record value.
	Bytes []byte
	// Timestamp is the record timestamp: processor.EmitWith's, else
	// Topology.Output.EventTime of the row; zero when neither sets one.
	Timestamp time.Time
	// Headers are the record headers (processor.EmitWith); nil: none.
	Headers []processor.Header
	// Partition is the input partition whose batch emitted the row.
	Partition int32
}

// TopicOutput is one committed record emitted with processor.EmitTo to a
// topic of Topology.Output.EmitTo.
type TopicOutput struct {
	Key, Value []byte
	Timestamp  time.Time // zero when processor.OutputMeta set none
	Headers    []processor.Header
	// Partition is the input partition whose batch emitted the row.
	Partition int32
}

// Driver runs a processor synchronously on the real engine — the same
// partition tasks, staging, timers, TTL, watermark, initial state and error
// handling as kstate.App.Run — over in-memory state shards, without Kafka,
// goroutines or sleeps. Time is the driver's clock, moved by AdvanceClock.
//
// A Driver is used by one goroutine (the test's). It is closed by
// t.Cleanup.
type Driver[K, I, O any] struct {
	t       testing.TB
	cfg     config[K, I, O]
	opts    options
	log     *slog.Logger
	valSer  serde.Serializer[I] // nil when ValueSerde is not a Serde
	now     time.Time
	parts   []*partition[K, I, O]
	initial map[int32][]engine.InitialRow[K]
	outputs []Output[O]
	topics  map[string][]TopicOutput // processor.EmitTo's outputs, by topic
	dead    []DeadLetter
	closed  bool

	retired         engine.Counters // counters of tasks closed by Restart
	rounds, commits int64
}

// New returns a Driver running top, the Topology the application ships
// with. It needs no kstate.Options: the driver has no Kafka, no state
// directory and its own clock; ApplicationID and Logger set what it does
// use. Without Output.Topic, the driver writes to a placeholder topic
// "output". The topology is validated as kstate.New validates it, and an
// error fails the test. The tasks are opened and their processors' Init
// has run when New returns.
func New[K, I, O any](t testing.TB, top kstate.Topology[K, I, O], opts ...Option) *Driver[K, I, O] {
	t.Helper()
	o := options{partitions: 1, start: defaultStart, topics: map[string][]Record{}, appID: defaultApplicationID}
	for _, opt := range opts {
		opt(&o)
	}
	if o.partitions < 1 {
		t.Fatalf("kstatetest: Partitions(%d): want at least 1", o.partitions)
	}
	if top.Output.Topic == "" {
		top.Output.Topic = "output"
	}
	if _, err := kstate.New(top, kstate.Options{
		ApplicationID: o.appID,
		Kafka:         kstate.KafkaOptions{Brokers: []string{"kstatetest:9092"}},
	}); err != nil {
		t.Fatalf("%v", publicError(err))
	}
	cfg := newConfig(top, o)
	d := &Driver[K, I, O]{t: t, cfg: cfg, opts: o, now: o.start, log: cfg.Logger}
	if d.log == nil {
		// The test's own log: quiet when the test passes.
		d.log = slog.New(slog.NewTextHandler(t.Output(), nil))
	}
	d.valSer, _ = cfg.ValueSerde.(serde.Serializer[I])
	if len(cfg.Inputs) > 0 {
		d.valSer, _ = cfg.Inputs[0].ValueSerde.(serde.Serializer[I])
	}
	t.Cleanup(d.Close)
	for i := range o.partitions {
		d.parts = append(d.parts, &partition[K, I, O]{id: int32(i), offsets: map[int]int64{}})
	}
	if err := d.loadInitial(); err != nil {
		t.Fatalf("%v", publicError(err))
	}
	for _, p := range d.parts {
		if err := d.open(p, kv.NewMemory()); err != nil {
			t.Fatalf("%v", publicError(err))
		}
	}
	return d
}

// Now is the driver clock: the processing time of the next batch.
func (d *Driver[K, I, O]) Now() time.Time { return d.now }

// AdvanceClock moves the driver clock forward by dur. No batch runs: call
// RunBatch to let due processing-time timers fire and TTL expire.
func (d *Driver[K, I, O]) AdvanceClock(dur time.Duration) {
	d.t.Helper()
	if dur < 0 {
		d.t.Fatalf("kstatetest: AdvanceClock(%v): the clock never goes back", dur)
	}
	d.now = d.now.Add(dur)
}

// Input queues a record with the driver clock as its timestamp.
func (d *Driver[K, I, O]) Input(key K, value I) {
	d.t.Helper()
	d.InputAt(key, value, d.now)
}

// InputAt queues a record with timestamp ts (the event time in EventTime
// mode unless Topology.EventTime says otherwise). The key is encoded with
// Topology.KeySerde and the value with the first input's ValueSerde
// (Topology.Inputs[0]), which must then be
// a serde.Serde (use InputRecord otherwise).
func (d *Driver[K, I, O]) InputAt(key K, value I, ts time.Time) {
	d.t.Helper()
	kb, err := d.cfg.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: Input: serialize key %#v: %v", key, err)
	}
	if d.valSer == nil {
		d.t.Fatalf("kstatetest: Input: Topology.Inputs[0].ValueSerde (%T) cannot serialize; use InputRecord with the value's bytes", d.cfg.Inputs[0].ValueSerde)
	}
	vb, err := d.valSer.Serialize(value)
	if err != nil {
		d.t.Fatalf("kstatetest: Input: serialize value %#v: %v", value, err)
	}
	d.InputRecord(kb, vb, ts)
}

// InputRecord queues a record of raw bytes with timestamp ts and headers
// (seen by the first input's ValueFromRecord), e.g. one that Topology.KeySerde or
// ValueSerde cannot decode. It goes to the partition
// murmur2(key) selects, like Kafka's default partitioner; a nil key (which
// Topology.OnDecodeError handles) goes to partition 0.
func (d *Driver[K, I, O]) InputRecord(key, value []byte, ts time.Time, headers ...processor.Header) {
	d.inputRecord(0, key, value, ts, headers)
}

func (d *Driver[K, I, O]) inputRecord(input int, key, value []byte, ts time.Time, headers []processor.Header) {
	p := d.parts[0]
	if key != nil {
		p = d.parts[engine.PartitionFor(key, len(d.parts))]
	}
	var hs []engine.Header
	for _, h := range headers {
		hs = append(hs, engine.Header{Key: h.Key, Value: h.Value})
	}
	p.queued = append(p.queued, engine.Record{Input: input, Offset: p.offsets[input], Key: key, Value: value, TimestampMs: ts.UnixMilli(), Headers: hs})
	p.offsets[input]++
}

// RunBatch runs one micro-batch on every partition that has queued input or
// is due one (in ProcessingTime mode every partition, so that timers fire
// and TTL is enforced, as the engine's trigger does), at the driver clock,
// and then commits it as the Kafka transaction would: outputs become
// visible to Outputs, state changes go to the in-memory changelog and the
// shards. On error every task aborts (no output, no state change), the
// queued input is dropped, and the error is what kstate.App.Run would
// return: match kstate.UserError, kstate.DecodeError and kstate.ModeError
// with errors.As. With Topology.GroupBy, a batch forwards the records of
// GroupBy inputs to the repartition topic (to the partition of their new
// key) and the NEXT batch processes them, as on Kafka: run two batches.
func (d *Driver[K, I, O]) RunBatch() error {
	if d.closed {
		return fmt.Errorf("kstatetest: RunBatch on a closed Driver")
	}
	return publicError(d.batch())
}

// MustRunBatch is RunBatch failing the test on error.
func (d *Driver[K, I, O]) MustRunBatch() {
	d.t.Helper()
	if err := d.RunBatch(); err != nil {
		d.t.Fatalf("RunBatch: %v", err)
	}
}

// Outputs returns the outputs committed since the last call to Outputs or
// OutputValues, in commit order (partition by partition within a batch,
// emission order within a partition).
func (d *Driver[K, I, O]) Outputs() []Output[O] {
	out := d.outputs
	d.outputs = nil
	return out
}

// TopicOutputs returns the records committed to topic (one of
// Topology.Output.EmitTo, written with processor.EmitTo) since the last call
// for that topic, in commit order.
func (d *Driver[K, I, O]) TopicOutputs(topic string) []TopicOutput {
	out := d.topics[topic]
	delete(d.topics, topic)
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

// RestartOption configures Restart.
type RestartOption func(*restartOptions)

type restartOptions struct{ keepLocal bool }

// KeepLocalState keeps the shards' contents across Restart, like a restart
// on the same disk: only the changelog tail after the shard's offset is
// restored. By default the shards are thrown away and restored in full.
func KeepLocalState() RestartOption { return func(o *restartOptions) { o.keepLocal = true } }

// Restart stops every task (the processors' Close runs) and starts them
// again: new in-memory shards are restored from the changelog the driver
// captured, through the engine's restore path, and the processors' Init
// runs again. Initial state is not applied again. Queued input stays queued.
// An error fails the test; RestartError returns it instead.
func (d *Driver[K, I, O]) Restart(opts ...RestartOption) {
	d.t.Helper()
	if err := d.RestartError(opts...); err != nil {
		d.t.Fatalf("Restart: %v", err)
	}
}

// RestartError is Restart returning the error that would make
// kstate.App.Run fail at start-up — an Init that fails, such as a state
// variable declared with an incompatible schema (*state.SchemaChangeError)
// — instead of failing the test. After an error the partitions whose
// start failed have no task: call Restart again (with a processor that
// starts) before RunBatch. Their shards are then restored from the
// changelog, KeepLocalState or not.
func (d *Driver[K, I, O]) RestartError(opts ...RestartOption) error {
	d.t.Helper()
	var o restartOptions
	for _, opt := range opts {
		opt(&o)
	}
	for _, p := range d.parts {
		store := kv.NewMemory()
		if o.keepLocal && p.task != nil {
			var err error
			if store, err = copyStore(p.store); err != nil {
				return fmt.Errorf("kstatetest: Restart: partition %d: keep local state: %v", p.id, err)
			}
		}
		if err := d.closeTask(p); err != nil {
			return publicError(err)
		}
		if err := d.open(p, store); err != nil {
			return publicError(err)
		}
	}
	return nil
}

// Counters returns the engine counters summed over every partition and
// every restart (rows in/out, late rows dropped, timers fired, TTL
// removals, restored records, ...).
func (d *Driver[K, I, O]) Counters() kstate.Counters { return d.Metrics().Total }

// Metrics returns a snapshot like kstate.App.Metrics: Total also counts
// tasks closed by Restart, Rounds (RunBatch calls) and Commits (batches
// that produced output or state changes).
func (d *Driver[K, I, O]) Metrics() kstate.Metrics {
	total := d.retired
	total.Add(engine.Counters{Rounds: d.rounds, Commits: d.commits})
	m := kstate.Metrics{Partitions: map[int32]kstate.Counters{}}
	for _, p := range d.parts {
		if p.task == nil {
			continue
		}
		c := p.task.Counters()
		m.Partitions[p.id] = publicapi.Counters(c).(kstate.Counters)
		total.Add(c)
		m.Assigned = append(m.Assigned, p.id)
	}
	m.Total = publicapi.Counters(total).(kstate.Counters)
	sort.Slice(m.Assigned, func(i, j int) bool { return m.Assigned[i] < m.Assigned[j] })
	return m
}

// Partition returns the input partition of key.
func (d *Driver[K, I, O]) Partition(key K) int32 {
	d.t.Helper()
	return d.parts[d.partitionOf(key)].id
}

func (d *Driver[K, I, O]) partitionOf(key K) int {
	d.t.Helper()
	kb, err := d.cfg.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: serialize key %#v: %v", key, err)
	}
	return int(engine.PartitionFor(kb, len(d.parts)))
}

// Close closes every task (the processors' Close runs); an error fails the
// test. It is idempotent, and registered with t.Cleanup by New.
func (d *Driver[K, I, O]) Close() {
	if d.closed {
		return
	}
	d.closed = true
	for _, p := range d.parts {
		if err := d.closeTask(p); err != nil {
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
	kb, err := d.cfg.KeySerde.Serialize(key)
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
	d.inputRecord(i, kb, vb, d.now, nil)
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
	for i, t := range inputTopics(d.cfg) {
		if t != topic {
			continue
		}
		if len(d.cfg.Inputs) > 0 {
			return i, d.cfg.Inputs[i]
		}
		return i, kstate.Input[I]{Topic: t, ValueSerde: d.cfg.ValueSerde, ValueFromRecord: d.cfg.ValueFromRecord}
	}
	d.t.Fatalf("kstatetest: input topic %q is not one of the application's %q", topic, inputTopics(d.cfg))
	return 0, kstate.Input[I]{}
}
