package engine

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/handle"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

func (t *Task[K, I, O]) metaErr(err error) error {
	return fmt.Errorf("partition %d: write metadata: %w", t.cfg.Partition, err)
}

// Metadata entries the engine keeps in every shard (changelogged like state).
const (
	MetaTimeMode   = "engine/time_mode"
	MetaOutputMode = "engine/output_mode"
	MetaWatermark  = "engine/watermark"
	// MetaLateWatermark is the watermark the previous committed batch ran
	// with (Spark's "watermark for late events"): an output whose event time
	// is older than it is an error. Timers fire at the current watermark
	// ("for eviction"), one batch ahead, so a timer may emit a row stamped
	// with its own expiry.
	MetaLateWatermark  = "engine/late_watermark"
	MetaBatchID        = "engine/batch_id"
	MetaInitialApplied = "engine/initial_state_applied"
	// MetaInputOffset is the input offset after the last record of the last
	// committed batch that had records: it must equal the group's committed
	// offset of the partition, which lets the owner detect a restore that
	// missed the changelog tail.
	MetaInputOffset = "engine/input_offset"
)

// DefaultMaxOutputBytes is the default of Config.MaxOutputBytes: 1 MiB,
// the default of kstate.Options.Kafka.MaxRecordBytes, which the producer applies to
// every record. An output over it fails its key (ErrOutputTooLarge) instead
// of failing the whole transaction in Produce on every retry.
const DefaultMaxOutputBytes = 1 << 20

// noWatermark is the internal "no event seen yet" watermark.
const noWatermark = math.MinInt64

// Config configures one partition task. The root package fills it from the
// application's Config; codecs and NewProcessor are required.
type Config[K, I, O any] struct {
	ApplicationID string
	RunID         string
	Topic         string // input topic, for error messages (the first one with Topics)
	// Topics are the input topics (inputs.go); nil = []string{Topic}.
	Topics    []string
	Partition int32
	Dir       string   // shard directory
	Backend   kv.Store // optional shard backend (tests); nil = RocksDB at Dir
	// Memory is the RocksDB memory budget shared by the Run's shards; nil =
	// a block cache and memtable per shard. Unused with Backend.
	Memory *kv.SharedMemory
	// StateCache is the committed-state cache shared by the Run's shards;
	// nil = none.
	StateCache *shard.Cache
	// WriteBehindBytes is the shard's write-behind budget
	// (shard.ShardOptions.WriteBehindBytes); 0 = write-through.
	WriteBehindBytes int64
	// WriteBehindBudget bounds the write-behind layers of the Run's shards
	// together (shard.WriteBehindBudget); nil = each its own bound.
	WriteBehindBudget *shard.WriteBehindBudget
	// MaxVarSets is shard.ShardOptions.MaxVariableSetVersions.
	MaxVarSets int
	// WallNow is shard.ShardOptions.Now (CoordinatorConfig.WallNow's
	// clock); nil = time.Now.
	WallNow func() time.Time
	// StoreBackend selects the store at Dir; "" = kv.DefaultBackend().
	StoreBackend kv.Backend

	TimeMode   processor.TimeMode
	OutputMode processor.OutputMode

	KeySerde     serde.Serde[K]
	ValueSerde   serde.Deserializer[I]
	OutputSerde  serde.Serializer[O]
	NewProcessor func() processor.StatefulProcessor[K, I, O]

	// EventTime extracts a row's event time (ms); nil = the record timestamp.
	EventTime func(value I, recordTimestampMs int64) int64
	// AllowedLatenessMs is subtracted from the max event time for the watermark.
	AllowedLatenessMs int64
	// OutputEventTime gives an output row's event time (ms), which becomes
	// the output record's timestamp; nil = no output event time.
	OutputEventTime func(O) int64
	// OutputKey gives an output record's key; nil = the grouping key bytes.
	OutputKey func(key K, out O) []byte
	// OutputTopics are the declared topics processor.EmitTo may write to;
	// nil = none.
	OutputTopics map[string]bool
	// ValueFromRecord, when set, decodes input values from the whole
	// record (metadata and headers) instead of ValueSerde.
	ValueFromRecord func(processor.Record) (I, error)
	// Inputs are the value decoders of Topics, in their order; nil = every
	// input decodes with ValueSerde / ValueFromRecord.
	Inputs []InputDecoder[I]
	// GroupKeys, per input (as Topics), re-key that input's records
	// through the repartition topic (repartition.go): the encoded grouping
	// key of a record. nil entries (or a nil slice): not re-keyed.
	GroupKeys []func(recordKey []byte, value I) ([]byte, error)
	// RepartitionInput is the index of the repartition topic in Topics,
	// whose records are decoded by the input their header names; 0: none.
	RepartitionInput int

	// Initial is the initial state shared by the Run's tasks; nil = none.
	Initial *InitialCache[K]

	// OnDecodeError: an undecodable record or a nil key (Fail, Skip or
	// DeadLetter). OnKeyPartition: a record whose key does not hash to
	// its partition (Allow, Fail or DeadLetter; the zero value Fail is
	// mapped by the root package, whose default is Allow).
	// OnProcessingError: a failing HandleInputRows or HandleExpiredTimer
	// call (Fail or DeadLetter; Init and HandleInitialState always fail).
	OnDecodeError, OnKeyPartition, OnProcessingError Policy
	// MaxOutputBytes bounds an emitted record's size as Kafka counts it
	// against max.message.bytes (recordsize.Of); a larger one is a
	// processing error (ErrOutputTooLarge). It bounds a state write's
	// changelog record likewise (shard.ErrValueTooLarge, a processing error
	// of the call that wrote it). 0: no bound; the root package sets
	// Options.Kafka.MaxRecordBytes, the limit its producer applies.
	MaxOutputBytes int
	// Logger receives the warnings about skipped, dead-lettered and
	// misrouted records. Nil discards them.
	Logger *slog.Logger

	// Sink, when set, receives every batch that emitted rows, before its
	// transaction commits: the partition, the batch id and the rows (the
	// grouping key and the emitted value of each, in emit order). Batches
	// are then planned (sink.go). Optional.
	Sink func(ctx context.Context, partition int32, batchID int64, keys []K, values []O) error
}

// InputDecoder decodes the values of one input topic: ValueFromRecord
// when set, else ValueSerde.
type InputDecoder[I any] struct {
	ValueSerde      serde.Deserializer[I]
	ValueFromRecord func(processor.Record) (I, error)
}

// Record is one polled input record of the task's partition.
type Record struct {
	// Input is the index of the record's topic in the input topics.
	Input       int
	Offset      int64
	Key, Value  []byte
	TimestampMs int64
	Headers     []Header
	// Misrouted is set by the coordinator when the key does not hash
	// (murmur2) to the record's partition; KeyPartition is where it hashes.
	Misrouted    bool
	KeyPartition int32
}

// Output is one output record produced by a batch.
type Output struct {
	// Topic is a declared output topic (Topology.Output.EmitTo, processor.EmitTo);
	// "": the main output topic.
	Topic       string
	Key, Value  []byte
	TimestampMs int64 // −1: no output event time (the producer sets the time)
	Headers     []Header
	// Seq numbers the batch's successful OutputSerde calls, rolled-back
	// ones included, so that a caller capturing the typed values (the
	// kstatetest driver) can match them to the outputs that remain; −1 for
	// outputs to other topics (EmitTo), which OutputSerde did not encode.
	Seq int
}

// DeadLetter is one record for the dead-letter topic: the original input
// record (key, value, timestamp, headers) with kstate.* headers appended
// that say where it came from and why it failed (see deadletter.go).
type DeadLetter struct {
	Key, Value  []byte
	TimestampMs int64 // −1: none
	Headers     []Header
}

// InitialRow is one initial-state row routed to this task. Apply calls the
// processor's HandleInitialState with the row's typed value.
type InitialRow[K any] struct {
	Key      K
	KeyBytes []byte
	Apply    func(proc any, tv processor.TimerValues) error
}

// Task runs the processor of one partition. It is driven by one goroutine at
// a time (the owner serialises Open/Start/RunBatch/Commit/Abort/Close);
// Counters may be read from any goroutine.
type Task[K, I, O any] struct {
	cfg    Config[K, I, O]
	shard  *shard.Shard
	timers *timers.Timers
	rt     *handle.Runtime
	proc   processor.StatefulProcessor[K, I, O]
	// groupKeys is RunBatch's scratch for the batch's grouping keys.
	groupKeys [][]byte

	// Durable (committed) task state, mirrored from shard metadata.
	fresh          bool  // shard has no engine metadata: no batch ever committed
	watermark      int64 // noWatermark until the first event
	lateWatermark  int64 // watermark of the previous committed batch; outputs older than it are late
	batchID        int64 // id of the next batch = committed non-empty batches
	initialApplied bool
	initial        []InitialRow[K] // rows to apply in the first batch (first run only)
	skips          []int64         // per input, the offset of the record to skip, -1: none (skip.go)
	wmAdvanced     bool            // the last commit advanced the watermark: timers may be due
	stats          shard.Stats     // shard statistics at the last commit

	// plan is the partition's last committed batch plan (with a Sink;
	// sink.go), pendPlan the one being committed.
	plan, pendPlan *Plan
	// sinkKeys/sinkValues are the batch's typed rows for the Sink.
	sinkKeys   []K
	sinkValues []O

	// The batch in progress; applied by Commit, dropped by Abort.
	inBatch bool
	pend    pending
	emitSeq int // successful OutputSerde calls of the batch (Output.Seq)
	// lastRows and lastOutputs are the rows grouped and the outputs of the
	// last batch that had rows: the next batch's outputs are presized from
	// their ratio (outputsHint).
	lastRows, lastOutputs int

	log            *slog.Logger
	warnedMismatch bool // the key-partition mismatch warning was logged

	closed bool

	// call is the processor call in progress (nil between calls), read by
	// the coordinator's watchdog from another goroutine. abandoned is set by
	// the coordinator when it gave up waiting for this task's batch: the
	// batch goroutine then stops at the next return from user code, and
	// Close skips the processor's Close (see Abandon).
	call      atomic.Pointer[activeCall[K]]
	abandoned atomic.Bool

	mu struct {
		sync.Mutex
		counters Counters
	}
}

type pending struct {
	watermark      int64
	lateWatermark  int64
	batchID        int64
	initialApplied bool
	counters       Counters
	skipped        []bool // per input: the batch consumed its skip (nil: none did)
}

// Open opens the task's shard. The caller restores the changelog tail into
// Shard() (from Shard().ChangelogOffset()) and then calls Start.
func Open[K, I, O any](cfg Config[K, I, O]) (*Task[K, I, O], error) {
	if cfg.KeySerde == nil || (cfg.ValueSerde == nil && cfg.ValueFromRecord == nil && len(cfg.Inputs) == 0) || cfg.OutputSerde == nil || cfg.NewProcessor == nil {
		return nil, fmt.Errorf("partition %d: key, value and output codecs and NewProcessor are required", cfg.Partition)
	}
	if len(cfg.Topics) == 0 {
		cfg.Topics = []string{cfg.Topic}
	}
	if len(cfg.Inputs) > 0 && len(cfg.Inputs) != len(cfg.Topics) {
		return nil, fmt.Errorf("partition %d: %d input decoders for %d input topics", cfg.Partition, len(cfg.Inputs), len(cfg.Topics))
	}
	for i, in := range cfg.Inputs {
		if in.ValueSerde == nil && in.ValueFromRecord == nil && (i != cfg.RepartitionInput || i == 0) {
			return nil, fmt.Errorf("partition %d: input topic %q has no value decoder", cfg.Partition, cfg.Topics[i])
		}
	}
	sh, err := shard.OpenShard(shard.ShardOptions{
		Dir:          cfg.Dir,
		Backend:      cfg.Backend,
		Memory:       cfg.Memory,
		Cache:        cfg.StateCache,
		StoreBackend: cfg.StoreBackend,
		// Write-behind local commits (shard/writebehind.go): the changelog
		// has every committed batch, restore replays what the store lacks.
		WriteBehindBytes:  cfg.WriteBehindBytes,
		WriteBehindBudget: cfg.WriteBehindBudget,
		AllowTTL:          cfg.TimeMode == processor.ProcessingTime,
		// Bound on changes of the set of variables (shard/registry.go).
		MaxVariableSetVersions: cfg.MaxVarSets,
		Now:                    cfg.WallNow,
		// A state value over the producer's limit fails its call, per key
		// (emit.go, close), not the whole transaction at produce time.
		MaxRecordBytes: cfg.MaxOutputBytes,
		// Local state is a cache of the changelog: damaged files are
		// deleted and the restore reads the whole changelog.
		RebuildCorrupt: true,
	})
	if err != nil {
		return nil, fmt.Errorf("partition %d: open shard: %w", cfg.Partition, err)
	}
	t := &Task[K, I, O]{cfg: cfg, shard: sh, watermark: noWatermark, lateWatermark: noWatermark}
	t.log = cfg.Logger
	if t.log == nil {
		t.log = slog.New(slog.DiscardHandler)
	}
	t.log = t.log.With("partition", cfg.Partition)
	if why := sh.Rebuilt(); why != nil {
		t.log.Warn("local state was damaged: deleted, restoring it from the changelog in full", "dir", cfg.Dir, "err", why)
	}
	if cfg.TimeMode != processor.NoTime {
		t.timers = timers.New(sh)
	}
	t.rt = handle.NewRuntime(handle.Config{
		Shard:    sh,
		Timers:   t.timers,
		TimeMode: cfg.TimeMode,
		Query: processor.QueryInfo{
			ApplicationID: cfg.ApplicationID,
			RunID:         cfg.RunID,
			Partition:     cfg.Partition,
		},
	})
	return t, nil
}

// Shard is the task's state shard (the restore target).
func (t *Task[K, I, O]) Shard() *shard.Shard { return t.shard }

// Partition is the task's input partition.
func (t *Task[K, I, O]) Partition() int32 { return t.cfg.Partition }

// dirSuffix is " <dir>" for messages naming the shard, "" for a shard
// without a directory (a test Backend).
func dirSuffix(dir string) string {
	if dir == "" {
		return ""
	}
	return " " + dir
}

// ShardDir is the shard's directory, for messages ("" with a Backend).
func (t *Task[K, I, O]) ShardDir() string { return t.cfg.Dir }

// Start reads the engine metadata of the restored shard, checks that the
// time and output modes are the ones the state was created with, creates
// the processor and runs its Init. It must be called once, after restore
// (the shard accepts no changelog once variables are declared) and before
// the first batch. Declarations and, on a fresh shard, the mode metadata
// are staged by the shard outside any batch: they are committed with the
// first batch and survive its aborts.
func (t *Task[K, I, O]) Start() error {
	if t.closed {
		return ErrClosed
	}
	tm, ok, err := t.shard.GetMeta(MetaTimeMode)
	if err != nil {
		return fmt.Errorf("partition %d: read metadata: %w", t.cfg.Partition, err)
	}
	t.fresh = !ok
	if ok && string(tm) != t.cfg.TimeMode.String() {
		return &ModeError{Partition: t.cfg.Partition, What: "time mode", Old: string(tm), New: t.cfg.TimeMode.String()}
	}
	om, ok, err := t.shard.GetMeta(MetaOutputMode)
	if err != nil {
		return fmt.Errorf("partition %d: read metadata: %w", t.cfg.Partition, err)
	}
	if ok && string(om) != t.cfg.OutputMode.String() {
		return &ModeError{Partition: t.cfg.Partition, What: "output mode", Old: string(om), New: t.cfg.OutputMode.String()}
	}
	if v, ok, err := t.metaInt(MetaWatermark); err != nil {
		return err
	} else if ok {
		t.watermark = v
		// Whether the last commit advanced the watermark was not kept: a
		// crash may have come before the batch firing the timers it made
		// due. Run that batch now rather than after the next input row.
		t.wmAdvanced = true
	}
	if v, ok, err := t.metaInt(MetaLateWatermark); err != nil {
		return err
	} else if ok {
		t.lateWatermark = v
	}
	if v, ok, err := t.metaInt(MetaBatchID); err != nil {
		return err
	} else if ok {
		t.batchID = v
	}
	_, t.initialApplied, err = t.shard.GetMeta(MetaInitialApplied)
	if err != nil {
		return fmt.Errorf("partition %d: read metadata: %w", t.cfg.Partition, err)
	}
	if err := t.loadPlan(); err != nil {
		return err
	}
	if err := t.loadSkips(); err != nil {
		return err
	}
	t.stats = t.shard.Stats()
	if t.fresh {
		if err := t.shard.PutMeta(MetaTimeMode, []byte(t.cfg.TimeMode.String())); err != nil {
			return t.metaErr(err)
		}
		if err := t.shard.PutMeta(MetaOutputMode, []byte(t.cfg.OutputMode.String())); err != nil {
			return t.metaErr(err)
		}
	}
	return t.initProcessor()
}

func (t *Task[K, I, O]) initProcessor() error {
	proc := t.cfg.NewProcessor()
	if proc == nil {
		return &UserError{Method: "NewProcessor", Partition: t.cfg.Partition, Err: errors.New("returned a nil processor")}
	}
	t.proc = proc
	t.rt.SetPhase(handle.PhaseInit)
	var zero K
	err := t.invoke("Init", zero, false, func() error { return proc.Init(t.rt.Handle()) })
	t.rt.SetPhase(handle.PhaseIdle)
	return err
}

func (t *Task[K, I, O]) metaInt(name string) (int64, bool, error) {
	b, ok, err := t.shard.GetMeta(name)
	if err != nil {
		return 0, false, fmt.Errorf("partition %d: read metadata %q: %w", t.cfg.Partition, name, err)
	}
	if !ok {
		return 0, false, nil
	}
	if len(b) != 8 {
		return 0, false, fmt.Errorf("partition %d: metadata %q has %d bytes, want 8", t.cfg.Partition, name, len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), true, nil
}

// StoredInputOffset returns MetaInputOffset as restored so far (it may be
// called before Start, between restore rounds).
func (t *Task[K, I, O]) StoredInputOffset(input int) (int64, bool, error) {
	return t.metaInt(InputOffsetMeta(input, t.topic(input)))
}

// topic returns the name of input i.
func (t *Task[K, I, O]) topic(i int) string {
	if i < len(t.cfg.Topics) {
		return t.cfg.Topics[i]
	}
	return t.cfg.Topic
}

// inputs returns the number of input topics.
func (t *Task[K, I, O]) inputs() int { return max(len(t.cfg.Topics), 1) }

func putInt(v int64) []byte { return binary.BigEndian.AppendUint64(nil, uint64(v)) }

// Fresh reports whether no batch of this partition was ever committed (after
// Start): the condition, together with "no committed input offsets", for
// applying initial state.
func (t *Task[K, I, O]) Fresh() bool { return t.fresh }

// InitialStateApplied reports whether the partition's initial state was
// committed (in this or an earlier run).
func (t *Task[K, I, O]) InitialStateApplied() bool { return t.initialApplied }

// SetInitialState hands the task the initial-state rows of its partition;
// they are applied in the next batch and dropped once it commits.
func (t *Task[K, I, O]) SetInitialState(rows []InitialRow[K]) { t.initial = rows }

// NeedsBatch reports whether the task wants a batch even without input: no
// batch was committed yet (the first one records the metadata, Init's
// declarations and the initial state), or the last commit (or, after a
// restart, the last commit of an earlier run) advanced the event-time
// watermark so that timers may have become due.
func (t *Task[K, I, O]) NeedsBatch() bool {
	return !t.closed && (t.fresh || t.wmAdvanced || len(t.initial) > 0 || t.Planned() != nil)
}

// Watermark is the committed event-time watermark in ms; −1 when none.
func (t *Task[K, I, O]) Watermark() int64 {
	if t.watermark == noWatermark {
		return -1
	}
	return t.watermark
}

// BatchID is the id the next batch will have.
func (t *Task[K, I, O]) BatchID() int64 { return t.batchID }

// Counters returns the task's cumulative counters (committed batches only).
func (t *Task[K, I, O]) Counters() Counters {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.mu.counters
}

// AddCounters adds counters measured by the owner (restore, commit).
func (t *Task[K, I, O]) AddCounters(c Counters) {
	t.mu.Lock()
	t.mu.counters.Add(c)
	t.mu.Unlock()
}

// Commit ends the batch after its transaction committed: the staged changes
// and nextChangelogOffset are written to the shard atomically. A negative
// offset keeps the shard's offset (the batch produced no changelog records).
func (t *Task[K, I, O]) Commit(nextChangelogOffset int64) error {
	if t.closed {
		return ErrClosed
	}
	if !t.inBatch {
		return ErrNoBatch
	}
	if nextChangelogOffset < 0 {
		nextChangelogOffset = t.shard.ChangelogOffset()
	}
	t.inBatch = false
	if err := t.shard.Commit(nextChangelogOffset); err != nil {
		// The transaction committed: Kafka holds the batch, the local shard
		// does not. The owner must close the task; a reopen restores the
		// missing tail from the changelog.
		return fmt.Errorf("partition %d: apply committed batch to the shard%s (Kafka has the batch: once the disk is fixed, a restart restores it from the changelog): %w",
			t.cfg.Partition, dirSuffix(t.cfg.Dir), err)
	}
	p := &t.pend
	t.wmAdvanced = p.watermark != t.watermark
	t.watermark = p.watermark
	t.lateWatermark = p.lateWatermark
	t.batchID = p.batchID
	t.initialApplied = p.initialApplied
	t.commitSkips()
	if t.initialApplied {
		t.initial = nil
	}
	t.fresh = false
	if t.plan != nil && !t.plan.Done {
		t.plan = &Plan{BatchID: t.plan.BatchID, Done: true}
	}
	// The shard counts committed work only, so the difference since the
	// last commit is exactly this batch's.
	st := t.shard.Stats()
	c := p.counters
	c.StateRowsUpdated = st.RowsUpdated - t.stats.RowsUpdated
	c.StateRowsRemoved = st.RowsRemoved - t.stats.RowsRemoved
	c.TTLRemovals = st.TTLRemovals - t.stats.TTLRemovals
	c.TimersRegistered = st.TimersRegistered - t.stats.TimersRegistered
	c.TimersDeleted = st.TimersDeleted - t.stats.TimersDeleted
	c.StateDeletesSkipped = st.DeletesSkipped - t.stats.DeletesSkipped
	t.stats = st
	t.AddCounters(c)
	return nil
}

// Abort ends the batch without applying it: staged changes, the advanced
// watermark, the batch id and the batch's counters are dropped, so the
// retried batch starts from the same point. (Init's declarations, staged
// outside the batch, stay staged for the retry.)
func (t *Task[K, I, O]) Abort() {
	if t.closed || !t.inBatch {
		return
	}
	t.inBatch = false
	t.shard.Abort()
}

// Close aborts a batch in progress, closes the processor and the shard
// (kept on disk). It is idempotent. After Abandon it does not call the
// processor's Close. The owner must not call it while RunBatch runs.
func (t *Task[K, I, O]) Close() error {
	if t.closed {
		return nil
	}
	t.Abort()
	perr := t.closeProcessor()
	t.closed = true
	serr := t.shard.Close()
	if perr != nil {
		return perr
	}
	if serr != nil {
		return fmt.Errorf("partition %d: close shard: %w", t.cfg.Partition, serr)
	}
	return nil
}

func (t *Task[K, I, O]) closeProcessor() error {
	if t.proc == nil {
		return nil
	}
	if t.abandoned.Load() {
		// A call of this processor was still running when its batch was
		// abandoned: Close must not run concurrently with it, and after
		// it the processor may be in any state.
		t.proc = nil
		return nil
	}
	p := t.proc
	t.proc = nil
	t.rt.SetPhase(handle.PhaseIdle)
	var zero K
	return t.invoke("Close", zero, false, p.Close)
}

// outputsHint is the capacity of a batch's outputs for rows grouped rows:
// as many per row as in the last batch (one for the first), so that the
// outputs (a large struct) do not grow by appending one by one.
func (t *Task[K, I, O]) outputsHint(rows int) int {
	if t.lastRows == 0 {
		return rows
	}
	return min(rows*t.lastOutputs/t.lastRows, 4*rows)
}

// Call is a processor call in progress, as seen by the watchdog.
type Call struct {
	Method string // "HandleInputRows", "HandleExpiredTimer", ...
	Key    string // formatted grouping key; empty for Init and Close
}

// CurrentCall returns the processor call in progress, if any. Safe from any
// goroutine.
func (t *Task[K, I, O]) CurrentCall() (Call, bool) {
	if c := t.call.Load(); c != nil {
		return Call{Method: c.method, Key: c.keyString()}, true
	}
	return Call{}, false
}

// Abandon marks the batch in progress as given up by its owner (safe from
// any goroutine, while RunBatch runs): when the processor call in
// progress returns, RunBatch returns ErrAbandoned without calling user
// code again, and Close (which the goroutine that ran RunBatch calls then)
// skips the processor's Close. The batch is never committed: the owner
// does not call Commit after abandoning.
func (t *Task[K, I, O]) Abandon() { t.abandoned.Store(true) }
