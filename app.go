package kstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"net/http"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/initial"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/runtime"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// App is a configured application. Create it with New and start it with Run.
type App[K, I, O any] struct {
	cfg config[K, I, O]
	sm  *stateMachine
	// metrics is the Prometheus collector and engine Observer (metrics_prom.go).
	metrics *appMetrics

	mu struct {
		sync.Mutex
		ran   bool
		coord *pipelineSet // of the Run in progress or finished; nil before
		admin *kafka.Admin // of the Run in progress; nil otherwise (KeyOwner)
		// positions are the Run's local shards, read by its sessions'
		// join metadata (joinGroup); nil before runOn created them.
		positions *engine.ShardPositions
		err       error // Run's error, once it returned
	}
}

// New validates the application t and how it runs, o (see Topology and
// Options for the defaults), and returns an App.
func New[K, I, O any](t Topology[K, I, O], o Options) (*App[K, I, O], error) {
	c, err := newConfig(t, o).withDefaults()
	if err != nil {
		return nil, err
	}
	a := &App[K, I, O]{cfg: c, sm: newStateMachine(c.OnStateChange)}
	a.metrics = newAppMetrics(c.ApplicationID, a.scrapeView)
	return a, nil
}

// InstanceID is the instance id in use (after defaults).
func (a *App[K, I, O]) InstanceID() string { return a.cfg.InstanceID }

// ChangelogTopic is the application's changelog topic.
func (a *App[K, I, O]) ChangelogTopic() string { return a.cfg.ApplicationID + "-changelog" }

// DeadLetterTopic is the topic the DeadLetter policies write to
// (Topology.DeadLetterTopic after defaults).
func (a *App[K, I, O]) DeadLetterTopic() string { return a.cfg.DeadLetterTopic }

// deadLetterTopic is the dead-letter topic the coordinator must ensure:
// none unless a policy dead-letters.
func (a *App[K, I, O]) deadLetterTopic() string {
	if !a.cfg.deadLetters() {
		return ""
	}
	return a.cfg.DeadLetterTopic
}

// Counters are cumulative counters of an App (Metrics.Total) or of one
// partition's task (Metrics.Partitions). The batch counters count
// committed batches only: an aborted (and retried) batch is not counted
// twice. The app-level counters (Commits, CommitLatency, Aborts, Rounds)
// are counted in Metrics.Total only. The Prometheus metrics of
// App.Handler's /metrics and App.Collector export the same figures.
type Counters struct {
	// Batches counts the committed micro-batches that held input, initial
	// state or due timers of the task.
	Batches int64
	// RowsIn counts the input rows handed to HandleInputRows.
	RowsIn int64
	// RowsOut counts the rows emitted (Emit, EmitTo, EmitWith).
	RowsOut int64
	// Keys counts the HandleInputRows calls: one a grouping key a batch.
	Keys int64
	// LateRowsDropped counts the EventTime rows at or before the
	// watermark, dropped before HandleInputRows.
	LateRowsDropped int64
	// TimersRegistered, TimersDeleted and TimersFired count the timers
	// registered, deleted (by DeleteTimer or after firing) and fired
	// (HandleExpiredTimer calls).
	TimersRegistered int64
	TimersDeleted    int64
	TimersFired      int64
	// TTLRemovals counts the state entries removed because their TTL
	// expired.
	TTLRemovals int64
	// InitialStateRows counts the Config.InitialState rows applied
	// (HandleInitialState calls).
	InitialStateRows int64
	// ChangelogRecords counts the records written to the changelog topic.
	ChangelogRecords int64
	// RestoreRecords counts the changelog records replayed into local
	// state at a partition's start, and RestoreTime the time the restores
	// took.
	RestoreRecords int64
	RestoreTime    time.Duration
	// Commits counts the committed transactions and CommitLatency sums
	// the time their commits took (app level).
	Commits       int64
	CommitLatency time.Duration
	// Aborts counts the aborted transactions (app level).
	Aborts int64
	// Rounds counts the batch rounds run, including the ones with nothing
	// to commit (app level).
	Rounds int64
	// DecodeErrors counts undecodable input records (nil keys included)
	// under DecodeErrorSkip or DecodeErrorDeadLetter.
	DecodeErrors int64
	// Skipped counts input records dropped by DecodeErrorSkip or by
	// SkipRecord (`kstate skip`).
	Skipped int64
	// DeadLettered counts records written to the dead-letter topic
	// (undecodable records, misrouted records, rows of failing keys, failed
	// timers).
	DeadLettered int64
	// ProcessingErrors counts handler calls that failed under
	// ProcessingErrorDeadLetter (their changes were discarded).
	ProcessingErrors int64
	// KeyPartitionMismatches counts records whose key does not hash to the
	// partition they were read from.
	KeyPartitionMismatches int64
	// StateDeletesSkipped counts the deleted state entries (tombstones)
	// the state store stepped over while scanning state (maps, lists,
	// timers), aborted batches included. It grows with deletions inside
	// the ranges scanned, until a compaction drops them; a per-batch
	// figure in the thousands means scans are slowed by them.
	StateDeletesSkipped int64
}

// newCounters is the public view of the engine's counters: the one place
// that maps them, so an engine counter is public only when added here.
func newCounters(c engine.Counters) Counters {
	return Counters{
		Batches: c.Batches, RowsIn: c.RowsIn, RowsOut: c.RowsOut, Keys: c.Keys, LateRowsDropped: c.LateRowsDropped,
		TimersRegistered: c.TimersRegistered, TimersDeleted: c.TimersDeleted, TimersFired: c.TimersFired,
		TTLRemovals: c.TTLRemovals, InitialStateRows: c.InitialStateRows, ChangelogRecords: c.ChangelogRecords,
		RestoreRecords: c.RestoreRecords, RestoreTime: c.RestoreTime,
		Commits: c.Commits, CommitLatency: c.CommitLatency, Aborts: c.Aborts, Rounds: c.Rounds,
		DecodeErrors: c.DecodeErrors, Skipped: c.Skipped, DeadLettered: c.DeadLettered,
		ProcessingErrors: c.ProcessingErrors, KeyPartitionMismatches: c.KeyPartitionMismatches,
		StateDeletesSkipped: c.StateDeletesSkipped,
	}
}

// Metrics is a snapshot of an App's counters.
type Metrics struct {
	// Total sums every task of the App (past and present) and the app-level
	// counters (Commits, CommitLatency, Aborts).
	Total Counters
	// Partitions holds the counters of the currently assigned tasks.
	Partitions map[int32]Counters
	// Assigned lists the assigned partitions; Restoring the subset still
	// restoring (paused).
	Assigned, Restoring []int32
	// FirstCommit is the time from the start of Run (the call) to its
	// first committed transaction, 0 until then: the restart-to-first-batch
	// time, including the start-up checks, a wait for an unreachable
	// cluster (StartupTimeout), the group join and the restore.
	FirstCommit time.Duration
	// BatchInFlight is the age of the micro-batch in flight (processor
	// calls running or its transaction ending), 0 between batches: alert
	// well below MaxBatchDuration.
	BatchInFlight time.Duration
}

// Metrics returns a snapshot of the counters. Safe to call at any time.
func (a *App[K, I, O]) Metrics() Metrics {
	a.mu.Lock()
	c := a.mu.coord
	a.mu.Unlock()
	m := Metrics{Partitions: map[int32]Counters{}}
	if c == nil {
		return m
	}
	s := c.Snapshot()
	m.Total = newCounters(s.Total)
	for p, pc := range s.Partitions {
		m.Partitions[p] = newCounters(pc)
	}
	m.Assigned, m.Restoring, m.FirstCommit = s.Assigned, s.Restoring, s.FirstCommit
	m.BatchInFlight = s.BatchInFlight
	return m
}

// Run joins the consumer group and processes until ctx is cancelled or an
// error stops it. It blocks. On cancellation it shuts down gracefully: the
// batch in flight commits or aborts (within ShutdownTimeout), processors
// and shards are closed, and the group is left (a static member stays until
// its session times out). It returns nil after a graceful shutdown, and
// otherwise the error that stopped it: a processor error or panic
// (UserError), an undecodable record (DecodeError), a mode change
// (ModeError), fencing by a newer instance (ErrFenced), a processor call
// that did not return within MaxBatchDuration (StuckError), or a Kafka or
// storage error. Run returns within ShutdownTimeout of the cancellation
// even if a processor call never returns (then with a StuckError); such a
// call's goroutine is left running, its task closed when it returns.
// Run may be called once per App. It drives the App's State (see State);
// it returns after the OnStateChange listener was called with the final
// change, and after the server of Options.Observability.HTTPAddr shut down.
func (a *App[K, I, O]) Run(ctx context.Context) error { return a.start(ctx, false, nil) }

// RunToEnd is a bounded Run (Spark's availableNow, a backfill, a test): it
// captures the input topic's end offsets at start (the last stable
// offsets, what read_committed consumers can read), processes everything
// before them in micro-batches (of at most MaxBatchRecords records when it
// is set; adaptive, large while the backlog lasts, by default) with the same
// exactly-once protocol as Run, and returns nil once the consumer group's
// committed offsets reached them, after a graceful shutdown (the group is
// left if LeaveGroupOnShutdown is set). Records written after the start are
// not waited for (some may be processed if a poll brings them along); the
// next run processes them. ctx cancelled, errors and the other rules are
// Run's; RunToEnd or Run may be called once per App.
//
// The end condition is the group's, so several instances can run one
// bounded job together: each returns when every input partition's
// committed offset reached its end, whoever processed it, which survives
// rebalances and crashed instances; an instance that finished its own
// partitions keeps polling until then. With NoTime and no InitialState, a
// run whose ends are committed already returns without joining the group:
// a second run with no new input returns at once. Otherwise the run joins
// and returns only when this instance has been assigned partitions and
// every one it holds is restored with nothing due: initial state applied,
// and (EventTime) the timers made due by the last batch's watermark fired;
// in ProcessingTime mode one more batch then runs at the end's processing
// time (Options.Observability.Clock), so the timers due by then fire and TTL is applied.
// docs/ARCHITECTURE.md describes the end check.
//
// A method rather than an Options field: whether a run stops is a property
// of the invocation, not of the application, so one Options serves the
// long-running deployment and its backfill or test, and Run keeps its
// contract (it runs until ctx is cancelled).
func (a *App[K, I, O]) RunToEnd(ctx context.Context) error { return a.start(ctx, true, nil) }

func init() {
	runtime.RunApp = func(ctx context.Context, app any, ports runtime.Ports) error {
		r, ok := app.(interface {
			start(context.Context, bool, *runtime.Ports) error
		})
		if !ok {
			return fmt.Errorf("runtime.RunApp: %T is not a *kstate.App", app)
		}
		return r.start(ctx, false, &ports)
	}
}

// start is Run and RunToEnd; ports are a test driver's (runtime.RunApp),
// nil for Kafka.
func (a *App[K, I, O]) start(ctx context.Context, bounded bool, ports *runtime.Ports) error {
	if bounded && len(a.cfg.GroupBy) > 0 {
		return ErrGroupByRunToEnd
	}
	a.mu.Lock()
	if a.mu.ran {
		a.mu.Unlock()
		return ErrRunning
	}
	a.mu.ran = true
	a.mu.Unlock()
	a.sm.set(Starting)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	if a.sm.listener != nil {
		wg.Go(func() { a.sm.listen(stop) })
	}
	started := time.Now() // Metrics.FirstCommit is measured from here
	var srv *http.Server
	var err error
	if ports == nil {
		srv, err = a.serve(&wg)
	}
	if err == nil {
		err = a.run(ctx, bounded, started, ports)
	}
	if ctx.Err() != nil {
		a.sm.set(Stopping)
	}
	a.mu.Lock()
	a.mu.err = err
	a.mu.Unlock()
	a.metrics.noteError(err)
	if err != nil {
		a.sm.set(Failed)
	} else {
		a.sm.set(Stopped)
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), httpShutdownTimeout)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	close(stop)
	wg.Wait()
	return err
}

// httpShutdownTimeout bounds the shutdown of the Options.Observability.HTTPAddr server.
const httpShutdownTimeout = 5 * time.Second

// serve starts serving Handler on Options.Observability.HTTPAddr, if set, on a goroutine
// added to wg.
func (a *App[K, I, O]) serve(wg *sync.WaitGroup) (*http.Server, error) {
	if a.cfg.HTTPAddr == "" {
		return nil, nil
	}
	ln, err := net.Listen("tcp", a.cfg.HTTPAddr)
	if err != nil {
		return nil, fmt.Errorf("kstate: Options.Observability.HTTPAddr: %w", err)
	}
	srv := &http.Server{Handler: a.Handler(), ReadHeaderTimeout: 10 * time.Second}
	wg.Go(func() { _ = srv.Serve(ln) })
	return srv, nil
}

// run is Run's work: the coordinators' run on ports (nil: Kafka's).
// started is Run's start, the zero of the engine's Clock.Elapsed.
func (a *App[K, I, O]) run(ctx context.Context, bounded bool, started time.Time, ports *runtime.Ports) error {
	if ports != nil {
		return a.runOn(ctx, bounded, *ports, nil)
	}
	cfg := &a.cfg
	a.metrics.kafka.reach.start() // readiness: does Kafka still answer (reach.go)
	defer a.metrics.kafka.reach.stop()
	adm, err := a.metrics.kafka.clientConfig(cfg.clientConfig(), "admin").NewAdmin()
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	defer adm.Close()
	a.mu.Lock()
	a.mu.admin = adm
	a.mu.Unlock()
	defer func() {
		a.mu.Lock()
		a.mu.admin = nil
		a.mu.Unlock()
	}()
	// The marker lets kstate reset tell this directory from any other
	// before it deletes it.
	if err := shard.MarkAppDir(filepath.Join(cfg.StateDir, cfg.ApplicationID), cfg.ApplicationID); err != nil {
		return fmt.Errorf("kstate: Options.State.Dir %s: %w", cfg.StateDir, err)
	}
	var mem *kv.SharedMemory // nil: a block cache and memtable per shard
	if cfg.StateMemory > 0 {
		if mem, err = kv.NewSharedMemory(cfg.StateMemory); err != nil {
			return fmt.Errorf("kstate: %w", err)
		}
		// Close only drops Run's reference: a shard still open (a stuck
		// task closed when its call returns) keeps the cache alive.
		defer mem.Close()
	}
	kadm := kafkaAdmin{a: adm, maxRecordBytes: cfg.MaxRecordBytes, rf: cfg.ReplicationFactor, minISR: cfg.MinInsyncReplicas,
		warned: new(sync.Map), log: cfg.Logger.With("app", cfg.ApplicationID)}
	return a.runOn(ctx, bounded, runtime.Ports{
		Admin:       kadm,
		Changelog:   kafkaChangelog{client: cfg.clientConfig(), admin: adm, app: cfg.ApplicationID, timeout: cfg.TransactionTimeout},
		Clock:       clock{now: cfg.Clock, start: started},
		NewSession:  a.joinGroup,
		CheckTopics: kadm.checkRecordLimit(a.producedTopics()...),
		ReadTopic:   readTopic(cfg.clientConfig()),
	}, mem)
}

// runOn runs the coordinators on ports: the one path of App.Run and of
// kstatetest (runtime.RunApp). mem is the shared state memory (nil: none).
func (a *App[K, I, O]) runOn(ctx context.Context, bounded bool, ports runtime.Ports, mem *kv.SharedMemory) error {
	cfg := &a.cfg
	runID := ports.RunID
	if runID == "" {
		runID = newRunID()
	}
	cache := shard.NewCache(cfg.StateCacheBytes) // nil (off) when negative
	batchBase, batchCap := cfg.batchLimits()
	trigger := cfg.TriggerInterval
	if ports.Test {
		batchBase, batchCap, trigger = runtime.TestMaxBatchRecords, 0, time.Nanosecond
	}
	kill := ports.KillHook
	if kill == nil {
		kill = engine.KillHookFrom(ctx)
	}
	// The process's local shards, shared by the pipelines: positions for
	// the group's balancer, standbys, cleanup (engine/positions.go).
	appDir := filepath.Join(cfg.StateDir, cfg.ApplicationID)
	if ports.Backend != nil {
		appDir = "" // a test driver's stores: no directory
	}
	positions, err := engine.NewShardPositions(engine.ShardPositionsConfig{
		Dir: appDir, CleanupDelay: cfg.StandbyCleanupDelay, Clock: ports.Clock, Logger: cfg.Logger.With("app", cfg.ApplicationID),
	})
	if err != nil {
		return fmt.Errorf("kstate: Options.State.Dir %s: %w", cfg.StateDir, err)
	}
	a.mu.Lock()
	a.mu.positions = positions
	a.mu.Unlock()
	base := engine.CoordinatorConfig{
		ApplicationID:        cfg.ApplicationID,
		InstanceID:           cfg.InstanceID,
		RunID:                runID,
		Topics:               cfg.engineTopics(),
		RepartitionTopic:     cfg.repartitionTopicOrNone(),
		OutputTopic:          cfg.OutputTopic,
		OutputTopics:         cfg.outputTopics(),
		Sink:                 len(cfg.Sinks) > 0,
		ChangelogTopic:       a.ChangelogTopic(),
		DeadLetterTopic:      a.deadLetterTopic(),
		ProcessingTime:       cfg.TimeMode == processor.ProcessingTime,
		TriggerInterval:      trigger,
		MaxBatchRecords:      batchBase,
		MaxBatchRecordsCap:   batchCap,
		RestoreTimeout:       cfg.TransactionTimeout,
		TransactionTimeout:   cfg.TransactionTimeout,
		ShutdownTimeout:      cfg.ShutdownTimeout,
		LeaveGroupOnShutdown: cfg.LeaveGroupOnShutdown,
		MaxBatchDuration:     cfg.MaxBatchDuration,
		MetadataRefresh:      cfg.MetadataRefresh,
		StartupTimeout:       cfg.StartupTimeout,
		RunToEnd:             bounded,
		BoundedNeedsTasks:    cfg.TimeMode != processor.NoTime || cfg.InitialState != nil,
		DeferFirstBatch:      !ports.Test,
		Admin:                ports.Admin,
		CheckTopics:          ports.CheckTopics,
		Changelog:            ports.Changelog,
		Clock:                ports.Clock,
		NewTask:              a.taskFactory(runID, mem, cache, ports),
		KillHook:             kill,
		Positions:            positions,
		Logger:               cfg.Logger,
		OnPhase:              func() { a.followPhase() },
		Observer:             a.metrics,
	}
	return a.neededPermission(publicError(a.runPipelines(ctx, base, ports))) // pipelines.go
}

// followPhase is the coordinator's OnPhase hook.
func (a *App[K, I, O]) followPhase() {
	a.mu.Lock()
	c := a.mu.coord
	a.mu.Unlock()
	if c != nil {
		a.sm.follow(c)
	}
}

// taskFactory builds the generic partition tasks for the non-generic
// coordinator; the tasks of one Run share the initial state.
func (a *App[K, I, O]) taskFactory(runID string, mem *kv.SharedMemory, cache *shard.Cache, ports runtime.Ports) engine.NewTask {
	cfg := &a.cfg
	// Write-behind local commits; negative: write-through.
	writeBehind := max(cfg.StateWriteBehindBytes, 0)
	if ports.Test {
		writeBehind = 0 // the driver reads the committed state from the store
	}
	// The shards' layers together stay near one budget however many
	// partitions the process owns (issue #29, many partitions).
	wbBudget := shard.NewWriteBehindBudget(shard.DefaultWriteBehindBudget)
	var init *engine.InitialCache[K]
	if cfg.InitialState != nil {
		init = engine.NewInitialCache(func(ctx context.Context) ([]engine.InitialRow[K], error) {
			return cfg.InitialState.Rows(ctx, ports.ReadTopic, cfg.KeySerde)
		})
	}
	decode, keyPart, processing := cfg.policies()
	log := cfg.Logger.With("app", cfg.ApplicationID)
	return func(p int32) (engine.TaskHandle, error) {
		var backend kv.Store
		dir := filepath.Join(cfg.StateDir, cfg.ApplicationID, strconv.Itoa(int(p)))
		if ports.Backend != nil {
			backend, dir = ports.Backend(p), ""
		}
		return engine.Open(engine.Config[K, I, O]{
			Backend:           backend,
			ApplicationID:     cfg.ApplicationID,
			RunID:             runID,
			Topic:             cfg.inputTopics()[0],
			Topics:            cfg.engineTopics(),
			Inputs:            cfg.engineDecoders(),
			GroupKeys:         cfg.groupKeys(),
			RepartitionInput:  cfg.repartitionInput(),
			Partition:         p,
			Dir:               dir,
			Memory:            mem,
			StateCache:        cache,
			WriteBehindBytes:  writeBehind,
			WriteBehindBudget: wbBudget,
			MaxVarSets:        cfg.MaxStateVariableSetVersions,
			StoreBackend:      kv.Backend(cfg.StateBackend),
			TimeMode:          cfg.TimeMode,
			OutputMode:        cfg.OutputMode,
			KeySerde:          cfg.KeySerde,
			ValueSerde:        cfg.ValueSerde,
			OutputSerde:       outputSerde(cfg.OutputSerde),
			NewProcessor:      cfg.NewProcessor,
			EventTime:         cfg.EventTime,
			AllowedLatenessMs: cfg.AllowedLateness.Milliseconds(),
			OutputEventTime:   cfg.OutputEventTime,
			OutputKey:         cfg.OutputKey,
			OutputTopics:      cfg.outputTopicSet(),
			ValueFromRecord:   cfg.ValueFromRecord,
			Initial:           init,
			Sink:              engineSink(cfg.Sinks),
			OnDecodeError:     decode,
			OnKeyPartition:    keyPart,
			OnProcessingError: processing,
			MaxOutputBytes:    cfg.MaxRecordBytes,
			Logger:            log,
		})
	}
}

// readTopic reads initial-state topics.
func readTopic(client kafka.ClientConfig) initial.ReadTopic {
	return func(ctx context.Context, topic string) ([]initial.Record, error) {
		recs, err := client.ReadAll(ctx, topic)
		out := make([]initial.Record, len(recs))
		for i, rec := range recs {
			out[i] = initial.Record{Topic: rec.Topic, Partition: rec.Partition, Offset: rec.Offset, Key: rec.Key, Value: rec.Value}
		}
		return out, err
	}
}

func newRunID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// producedTopics are the topics whose max.message.bytes is checked: the
// output topic (when set) and the changelog.
func (a *App[K, I, O]) producedTopics() []string {
	ts := append([]string{a.ChangelogTopic()}, a.cfg.outputTopics()...)
	if a.cfg.OutputTopic != "" {
		ts = append(ts, a.cfg.OutputTopic)
	}
	return ts
}

// outputSerde is s, or a no-op without an output topic (Sinks only).
func outputSerde[O any](s serde.Serializer[O]) serde.Serializer[O] {
	if s == nil {
		return noOutput[O]{}
	}
	return s
}
