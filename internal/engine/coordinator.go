package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/startup"
)

// CoordinatorConfig configures a Coordinator. Every field is required
// unless marked; the root package fills it from kstate.Topology and kstate.Options (where the
// defaults are declared) and from adapters over internal/kafka.
type CoordinatorConfig struct {
	// Sink: the tasks have a sink, so every batch is planned first
	// (sink.go) and OutputTopic is optional. Optional.
	Sink bool

	ApplicationID string // consumer group id
	InstanceID    string // for messages
	RunID         string // for messages
	Topic         string // the input topic (the first one with Topics)
	// Topics are the input topics, co-partitioned (inputs.go); Topics[0]
	// is Topic. Optional: nil = []string{Topic}.
	Topics         []string
	OutputTopic    string
	ChangelogTopic string
	// RepartitionTopic is the GroupBy repartition topic (repartition.go),
	// the last of Topics: created at start with the inputs' partition
	// count (delete policy) if missing. Optional; "" = none.
	RepartitionTopic string
	// DeadLetterTopic receives the records the tasks dead-letter; it is
	// created with the input's partition count if missing. Optional:
	// empty when no policy dead-letters.
	DeadLetterTopic string
	// OutputTopics are further output topics (processor.EmitTo); each must
	// exist at start. Optional.
	OutputTopics []string

	// ProcessingTime makes a batch run every TriggerInterval even without
	// input (TimeMode ProcessingTime).
	ProcessingTime  bool
	TriggerInterval time.Duration
	// MaxBatchRecords bounds the records of one poll, and so of one batch.
	// With MaxBatchRecordsCap above it, it is the base of adaptive
	// batches (adaptive.go): the limit doubles, up to the cap, while polls
	// come back full and batches stay short, and halves back toward
	// MaxBatchRecords once polls return less than half of it.
	MaxBatchRecords int
	// MaxBatchRecordsCap, when above MaxBatchRecords, makes batch sizes
	// adaptive up to it. Optional; 0: the limit is MaxBatchRecords, fixed.
	MaxBatchRecordsCap int
	// RestoreTimeout bounds the wait for a changelog that lags the group's
	// committed offset (the transaction timeout: a commit marker is
	// visible by then).
	RestoreTimeout time.Duration
	// TransactionTimeout is the session's transaction timeout: batches
	// produce while their tasks run (round.go) only while the previous
	// batch's tasks took at most a quarter of it. Optional; 0: RestoreTimeout.
	TransactionTimeout time.Duration
	// RestoreRetry is the pause between restore rounds while waiting.
	// Optional; default 50ms.
	RestoreRetry time.Duration
	// WallNow is the wall clock the age of a shard's changelog offset is
	// measured on (stale.go), against the changelog's record timestamps.
	// Optional; default time.Now.
	WallNow func() time.Time
	// ShutdownTimeout bounds the batch in flight after the Run ctx ends,
	// and separately the group leave of LeaveGroupOnShutdown.
	ShutdownTimeout time.Duration
	// LeaveGroupOnShutdown makes a graceful shutdown (the Run ctx
	// cancelled, Run returning nil) leave the group through the session's
	// GroupLeaver, even as a static member. Optional; false: the session
	// is only closed, and a static member stays in the group until its
	// session times out.
	LeaveGroupOnShutdown bool
	// BeforeSessionClose, if set, is called once the tasks are closed and
	// before the session is closed, with whether the shutdown is graceful.
	// Several pipelines of one App use it to close their sessions together:
	// a pipeline's last transaction, or a group join in flight, waits for
	// every member to join the group's rebalance again, and a pipeline that
	// closed its session (a static member) never does. Optional.
	BeforeSessionClose func(graceful bool)
	// MaxBatchDuration bounds the processor calls of one batch: past it
	// the round is given up and Run returns a StuckError (watchdog.go).
	// Optional; default 5m.
	MaxBatchDuration time.Duration
	// StuckWarnEvery is the interval of the watchdog's warnings about a
	// batch still running. Optional; default MaxBatchDuration/10, at most
	// 10s.
	StuckWarnEvery time.Duration
	// StartupTimeout bounds how long setup retries Admin errors wrapping
	// ErrUnavailable (brokers not up yet), with backoff, each retry logged
	// at Warn. Optional; 0: no retry.
	StartupTimeout time.Duration
	// StartupDeadline is when the start-up (setup and the first poll,
	// which initialises the producer) must be done, in real time: calls
	// that hang (a broker that accepts connections and never answers) are
	// cancelled then, and Run returns a *StartupTimeoutError. Optional;
	// zero: StartupTimeout after Run started (none when StartupTimeout is
	// 0). Several pipelines share the App's.
	StartupDeadline time.Time
	// CheckTopics runs extra start-up checks after the topic checks of
	// setup (the root package compares the output topic's
	// max.message.bytes with Options.Kafka.MaxRecordBytes). Its ErrUnavailable
	// errors are retried like the Admin's. Optional.
	CheckTopics func(ctx context.Context) error
	// MetadataRefresh is how often the loop re-reads the input topic's
	// partition count to detect a change (PartitionsChangedError); an
	// assignment naming an unknown partition checks at once. Optional;
	// default 30s.
	MetadataRefresh time.Duration
	// RunToEnd makes Run a bounded run (bounded.go): it captures the
	// input's end offsets at start and returns nil once the group's
	// committed offsets reached them. Admin must implement StableOffsetter.
	// Optional.
	RunToEnd bool
	// DeferFirstBatch makes a resumed partition's first batch without
	// input wait (at most a second) for its first records (round.go,
	// deferFirst). Optional.
	DeferFirstBatch bool
	// BoundedNeedsTasks (RunToEnd): the processor has timers or initial
	// state, so the end also needs this instance's partitions restored
	// with nothing due, and the run joins the group even when the ends
	// are committed already. Optional.
	BoundedNeedsTasks bool

	Admin      Admin
	NewSession func() (Session, error) // called once by Run, after the topic checks
	Changelog  Changelog
	Clock      Clock
	NewTask    NewTask

	// Positions is the process's local shards, shared by its pipelines
	// (positions.go): their changelog positions for the group's balancer,
	// who uses each (active task or standby), and their cleanup.
	// Optional: nil gives the coordinator one of its own, with no
	// directory (nothing read at start, nothing cleaned up).
	Positions *ShardPositions
	// StandbyRefresh is how often a caught-up standby opens its changelog
	// again to read what was committed since (standby.go). Optional;
	// default 1s.
	StandbyRefresh time.Duration
	// StandbyTurnRecords bounds the changelog records one standby applies
	// before the next standby's turn. Optional; default 100,000.
	StandbyTurnRecords int
	// StandbyBytesPerSecond bounds the changelog bytes (keys and values)
	// the standbys read per second. Optional; default 64 MiB; negative:
	// no bound.
	StandbyBytesPerSecond int64
	// StandbyGate, if set, is called before every standby turn and may
	// hold it (a test driver runs the turns between loop iterations, as
	// it runs restores). Optional.
	StandbyGate func(ctx context.Context) error

	// Observer receives batch latencies, aborts and group changes
	// (observe.go). Optional.
	Observer Observer
	// OnPhase is called after the phase changed (read it with Phase), from
	// the loop or the shutdown timer goroutine, never under the
	// coordinator's locks; it must not block. Optional.
	OnPhase func()
	// KillHook is set only by crash tests (see WithKillHook). Optional.
	KillHook KillHook
	// Logger receives operational messages with structured attributes
	// (app, partition, batch, ...). Nil discards them.
	Logger *slog.Logger
}

const (
	defaultRestoreRetry    = 50 * time.Millisecond
	defaultMetadataRefresh = 30 * time.Second
)

// Coordinator is one run of an application instance: the group session,
// the partition tasks and the batch loop. The loop goroutine (the one in
// Run) owns the session and drives every batch; group events are delivered
// by the session inside Poll, on that same goroutine, so they never race
// with a batch. Restore goroutines (one per partition being restored, see
// slots.go) only touch their own task until they hand it over under mu.
type Coordinator struct {
	cfg   CoordinatorConfig
	clock Clock
	log   *slog.Logger
	sizer *batchSizer // the next poll's record limit (the loop's own)
	// lastTasks is how long the last batch's tasks ran (round start to the
	// last RunBatch returned), for round.go's overlap guard; the loop's own.
	lastTasks time.Duration
	// lastTxn is the last batch's fixed per-transaction time (produce tail
	// and End, round.go), for the sizer; the loop's own.
	lastTxn time.Duration
	// lastStaged is the last batch's changelog weight (stagedWeight), for
	// the sizer.
	lastStaged int64
	msgs       msgPool // record arrays for the batches' produce calls (produce.go); the loop's own
	// deleteRetention is the changelog's delete.retention.ms (a
	// time.Duration; 0: unknown), read at start-up (stale.go).
	deleteRetention atomic.Int64

	partitions    int // of the input (and changelog) topic
	outPartitions int
	// topicPartitions holds the partition counts of OutputTopics.
	topicPartitions map[string]int
	dlqPartitions   int // of DeadLetterTopic; 0 without one
	// createdChangelog: setup created the changelog topic (it was
	// missing) and failed later; the failed Run deletes it again
	// (startup.go). Cleared once setup succeeded.
	createdChangelog atomic.Bool
	start            time.Duration // Clock.Elapsed at the start of Run
	lastTrigger      time.Time     // Clock time of the last ProcessingTime trigger
	// Loop-only: the layout watch (topology.go).
	lastMetadata time.Duration // Clock.Elapsed of the last partition count check
	unknownPart  int32         // highest assigned partition ≥ partitions; -1: none

	session Session
	// standby is the standby reader (standby.go).
	standby *standbys

	// Loop-only: the start-up deadline (see CoordinatorConfig); polled is
	// set once a poll returned (the start-up is over).
	startupDeadline time.Time
	polled          bool
	// Loop-only: reconnects after Kafka was unreachable (reconnect.go).
	reconnects     int
	lastReconnect  time.Duration
	reconnectDelay time.Duration

	// bnd is the state of a bounded run (RunToEnd); nil otherwise.
	// forceTrigger makes the next batch a ProcessingTime trigger
	// (finishBounded). Loop-only.
	bnd          *bounded
	forceTrigger bool

	// workCtx bounds Kafka calls of batches and restores. It outlives the
	// Run ctx by ShutdownTimeout, so that the batch in flight at
	// cancellation can still commit.
	workCtx    context.Context
	cancelWork context.CancelFunc
	wg         sync.WaitGroup // restore goroutines and the shutdown timer
	// shutdownExpired is closed when ShutdownTimeout passed after the Run
	// ctx was cancelled: the batch in flight is given up.
	shutdownExpired chan struct{}

	mu struct {
		sync.Mutex
		slots       map[int32]*slot
		err         error // first error of a restore goroutine
		firstCommit time.Duration
		// retired sums the counters of tasks closed so far and the
		// coordinator's own counters (Commits, Aborts, Rounds, ...).
		retired Counters
		// inFlight is set while a round's tasks run and until its
		// transaction ended; roundStart is its Clock.Elapsed at start.
		inFlight   bool
		roundStart time.Duration
		phase      Phase         // phase.go
		lastCommit time.Duration // Clock.Elapsed of the last commit; 0: none
		partitions int           // copy of partitions for other goroutines (query.go)
		batchLimit int           // the record limit of the next poll (Snapshot)

		// roundParts and roundRecords are the partitions and the input
		// records of the round in flight (valid while inFlight; Snapshot).
		roundParts   []int32
		roundRecords int
		// rejoining: a reconnect (reconnect.go) closed every task; the
		// phase stays Starting until the new session is assigned
		// partitions.
		rejoining bool
		// session is the loop's session, for the shutdown timer
		// (abandonSession); set with setSession.
		session Session
	}
}

// NewCoordinator validates cfg and returns a Coordinator ready to Run once.
func NewCoordinator(cfg CoordinatorConfig) (*Coordinator, error) {
	switch {
	case cfg.Admin == nil || cfg.NewSession == nil || cfg.Changelog == nil || cfg.NewTask == nil || cfg.Clock == nil:
		return nil, errors.New("engine: CoordinatorConfig needs Admin, NewSession, Changelog, NewTask and Clock")
	case len(cfg.Topics) == 0 && cfg.Topic != "":
		cfg.Topics = []string{cfg.Topic}
	}
	if len(cfg.Topics) > 0 {
		cfg.Topic = cfg.Topics[0]
	}
	switch {
	case cfg.Topic == "" || (cfg.OutputTopic == "" && !cfg.Sink) || cfg.ChangelogTopic == "":
		return nil, errors.New("engine: CoordinatorConfig needs the input, output and changelog topics")
	case hasDuplicate(cfg.Topics):
		return nil, fmt.Errorf("engine: CoordinatorConfig.Topics %q names a topic twice", cfg.Topics)
	case cfg.RepartitionTopic != "" && (len(cfg.Topics) < 2 || cfg.Topics[len(cfg.Topics)-1] != cfg.RepartitionTopic):
		return nil, fmt.Errorf("engine: CoordinatorConfig.RepartitionTopic %q must be the last of Topics %q", cfg.RepartitionTopic, cfg.Topics)
	case cfg.RepartitionTopic != "" && cfg.RunToEnd:
		return nil, errors.New("engine: CoordinatorConfig.RunToEnd does not support a repartition topic")
	case cfg.MaxBatchRecords <= 0 || cfg.RestoreTimeout <= 0 || cfg.ShutdownTimeout <= 0 ||
		(cfg.ProcessingTime && cfg.TriggerInterval <= 0):
		return nil, errors.New("engine: CoordinatorConfig needs positive MaxBatchRecords, RestoreTimeout, ShutdownTimeout and (ProcessingTime) TriggerInterval")
	}
	if _, ok := cfg.Admin.(StableOffsetter); cfg.RunToEnd && !ok {
		return nil, errors.New("engine: CoordinatorConfig.RunToEnd needs an Admin implementing StableOffsetter")
	}
	if cfg.RestoreRetry <= 0 {
		cfg.RestoreRetry = defaultRestoreRetry
	}
	if cfg.MaxBatchDuration <= 0 {
		cfg.MaxBatchDuration = defaultMaxBatchDuration
	}
	if cfg.StuckWarnEvery <= 0 {
		cfg.StuckWarnEvery = min(cfg.MaxBatchDuration/10, 10*time.Second)
	}
	if cfg.MetadataRefresh <= 0 {
		cfg.MetadataRefresh = defaultMetadataRefresh
	}
	if cfg.StandbyRefresh <= 0 {
		cfg.StandbyRefresh = defaultStandbyRefresh
	}
	if cfg.StandbyTurnRecords <= 0 {
		cfg.StandbyTurnRecords = defaultStandbyTurnRecords
	}
	if cfg.StandbyBytesPerSecond == 0 {
		cfg.StandbyBytesPerSecond = defaultStandbyBytesPerSecond
	}
	if cfg.Positions == nil {
		pos, err := NewShardPositions(ShardPositionsConfig{Clock: cfg.Clock, Logger: cfg.Logger})
		if err != nil {
			return nil, err
		}
		cfg.Positions = pos
	}
	c := &Coordinator{cfg: cfg, clock: cfg.Clock, sizer: newBatchSizer(cfg.MaxBatchRecords, cfg.MaxBatchRecordsCap, cfg.MaxBatchDuration)}
	c.standby = newStandbys(c)
	c.mu.batchLimit = c.sizer.next()
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c.log = log.With("app", cfg.ApplicationID)
	c.mu.slots = make(map[int32]*slot)
	c.shutdownExpired = make(chan struct{})
	c.unknownPart = -1
	return c, nil
}

// Run joins the group and processes until ctx is cancelled or an error
// stops it; it returns nil after a graceful shutdown. Run may be called
// once.
func (c *Coordinator) Run(ctx context.Context) (err error) {
	c.start = c.clock.Elapsed()
	c.startupDeadline = c.cfg.StartupDeadline
	if c.startupDeadline.IsZero() && c.cfg.StartupTimeout > 0 {
		c.startupDeadline = time.Now().Add(c.cfg.StartupTimeout)
	}
	c.workCtx, c.cancelWork = context.WithCancel(context.WithoutCancel(ctx))
	stop := make(chan struct{})
	stopCtx, cancelStop := context.WithCancel(context.Background())
	c.wg.Go(func() {
		// After ctx is cancelled, the batch in flight has ShutdownTimeout.
		select {
		case <-stop:
			return
		case <-ctx.Done():
		}
		c.stopping()
		if c.clock.Sleep(stopCtx, c.cfg.ShutdownTimeout) == nil {
			c.log.Warn("shutdown timeout exceeded: abandoning the batch in flight", "shutdown_timeout", c.cfg.ShutdownTimeout)
			close(c.shutdownExpired)
			c.cancelWork()
			// A Kafka call that the cancellation does not end (a produce
			// waiting for a broker that is down) would hold Run: cut the
			// session off under it once the batch had abandonGrace to
			// give up by itself (reconnect.go).
			if c.clock.Sleep(stopCtx, abandonGrace) == nil {
				c.abandonSession()
			}
		}
	})
	defer func() {
		// Graceful: stopped by ctx, with no error to report (a stuck batch
		// or processor Init found by failed is reported below).
		// A bounded run that reached its end stops gracefully too.
		ended := c.bnd != nil && c.bnd.ended
		graceful := err == nil && (ctx.Err() != nil || ended) && c.failed() == nil
		if cerr := c.shutdown(graceful); err == nil && ctx.Err() == nil {
			err = cerr
		}
		// A processor Init given up during the shutdown (or a revoke
		// just before it) is reported even though ctx was cancelled,
		// like a batch given up at ShutdownTimeout.
		var stuck *StuckError
		if ferr := c.failed(); err == nil && errors.As(ferr, &stuck) {
			err = ferr
		}
		close(stop)
		cancelStop()
		c.cancelWork()
		c.wg.Wait()
	}()

	if err := c.setup(ctx); err != nil {
		if ctx.Err() != nil {
			return nil
		}
		return err
	}
	if c.bnd != nil && c.bnd.ended {
		return nil // a bounded run with nothing to do: never joined
	}
	c.cfg.Positions.start() // the cleanup of local shards (positions.go)
	defer c.cfg.Positions.stop()
	c.log.Info("started", "instance", c.cfg.InstanceID, "transactional_id", c.session.TransactionalID(), "run", c.cfg.RunID,
		"input", c.cfg.Topics, "partitions", c.partitions, "output", c.cfg.OutputTopic, "changelog", c.cfg.ChangelogTopic)
	events := groupEvents{c}
	for {
		if err := c.failed(); err != nil {
			if !reconnectable(err) || ctx.Err() != nil {
				return err
			}
			// A restore found Kafka unreachable: rejoin (reconnect.go).
			c.mu.Lock()
			c.mu.err = nil
			c.mu.Unlock()
			if err := c.reconnect(ctx, "restore", err); err != nil {
				return err
			}
			continue
		}
		pctx, cancelPoll := c.pollCtx(ctx)
		recs, err := c.session.Poll(pctx, c.sizer.next(), events)
		cancelPoll()
		if err != nil {
			switch {
			case ctx.Err() != nil:
				return nil
			case !c.polled && c.reconnects == 0:
				return c.startupFailed(ctx, pctx, "the producer's init (InitProducerId)", c.kafkaErr("poll", err))
			case reconnectable(err):
				if err := c.reconnect(ctx, "poll", err); err != nil {
					return err
				}
				continue
			}
			return c.kafkaErr("poll", err)
		}
		c.polled = true
		if err := c.checkLayout(ctx); err != nil {
			return err
		}
		c.promote()
		c.rejoined()
		c.updatePhase()
		polled := c.clock.Elapsed()
		c.lastTxn, c.lastStaged = 0, 0
		if err := c.batch(recs); err != nil {
			if reconnectable(err) && ctx.Err() == nil {
				if err := c.reconnect(ctx, "batch", err); err != nil {
					return err
				}
				continue
			}
			return err
		}
		if len(recs) == 0 {
			if err := c.flushIdle(); err != nil {
				return err
			}
		}
		took := c.clock.Elapsed() - polled
		c.noteLag()
		lag := c.totalLag()
		c.cfg.Positions.noteBacklog(len(recs), lag, c.clock.Elapsed()) // the standby readers yield to it (standby.go)
		c.sizer.observe(batchObs{n: len(recs), took: took, txn: c.lastTxn, lag: lag, staged: c.lastStaged})
		c.mu.Lock()
		c.mu.batchLimit = c.sizer.next()
		c.mu.Unlock()
		if ctx.Err() != nil {
			return nil
		}
		if c.bnd != nil && c.shouldCheck(recs) {
			done, err := c.reachedEnd(ctx, false)
			if err != nil {
				if ctx.Err() != nil {
					return nil
				}
				return err
			}
			if done {
				return c.finishBounded()
			}
		}
	}
}

// setup checks the topics and joins the group, retrying while Kafka is
// unreachable (see StartupTimeout).
//
// The whole start-up, including the first poll (Run), is bounded by one
// deadline (CoordinatorConfig.StartupDeadline): a call that hangs is
// cancelled then, and the error is a *StartupTimeoutError.
func (c *Coordinator) setup(ctx context.Context) error {
	sctx, cancel := ctx, context.CancelFunc(func() {})
	if !c.startupDeadline.IsZero() {
		sctx, cancel = context.WithDeadline(ctx, c.startupDeadline)
	}
	defer cancel()
	stopWarn := c.warnStarting("the topic checks and the group join")
	defer stopWarn()
	out, err := startup.Retry{
		Unreachable: func(err error) bool { return errors.Is(err, ErrUnavailable) && ctx.Err() == nil },
		Expired: func(delay time.Duration) bool {
			waited := c.clock.Elapsed() - c.start
			return sctx.Err() != nil || waited+delay > c.cfg.StartupTimeout || time.Now().Add(delay).After(c.startupDeadline)
		},
		Sleep: c.clock.Sleep,
		Warn: func(delay time.Duration, err error) {
			c.log.Warn(startup.WarnMessage, "retry_in", delay, "waited", (c.clock.Elapsed() - c.start).Round(time.Millisecond),
				"startup_timeout", c.cfg.StartupTimeout, "err", err)
		},
	}.Do(sctx, c.checkTopics)
	switch {
	case out == startup.Expired:
		return c.startupFailed(ctx, sctx, "the topic checks", err)
	case out == startup.Interrupted:
		if ctx.Err() != nil {
			return err
		}
		return c.startupFailed(ctx, sctx, "the topic checks", ErrUnavailable)
	case err != nil:
		if sctx.Err() != nil && ctx.Err() == nil {
			return c.startupFailed(ctx, sctx, "the topic checks", err)
		}
		return err
	}
	// Started: the changelog is the application's now, whatever fails
	// later (DropCreatedChangelog).
	c.createdChangelog.Store(false)
	return nil
}

// checkTopics checks the input, changelog and output topics, then joins
// the group.
func (c *Coordinator) checkTopics(ctx context.Context) error {
	n, err := c.cfg.Admin.Partitions(ctx, c.cfg.Topic)
	if err != nil {
		return fmt.Errorf("kstate: input topic %q: %w", c.cfg.Topic, err)
	}
	for _, t := range c.cfg.Topics[1:] {
		if t == c.cfg.RepartitionTopic {
			continue // created and checked by ensureRepartition below
		}
		m, err := c.cfg.Admin.Partitions(ctx, t)
		if err != nil {
			return fmt.Errorf("kstate: input topic %q: %w", t, err)
		}
		if m != n {
			return fmt.Errorf("kstate: %w", &InputPartitionsError{Topic: c.cfg.Topic, Partitions: n, Other: t, OtherPartitions: m})
		}
	}
	c.partitions = n
	c.mu.Lock()
	c.mu.partitions = n
	c.mu.Unlock()
	c.lastMetadata = c.clock.Elapsed()
	missing, err := c.checkChangelog(ctx)
	if err != nil {
		return err
	}
	// What must exist is checked before anything is created (startup.go).
	if c.cfg.OutputTopic != "" { // optional with a sink
		if c.outPartitions, err = c.cfg.Admin.Partitions(ctx, c.cfg.OutputTopic); err != nil {
			return fmt.Errorf("kstate: output topic %q (create it before Run): %w", c.cfg.OutputTopic, err)
		}
	}
	c.topicPartitions = make(map[string]int, len(c.cfg.OutputTopics))
	for _, t := range c.cfg.OutputTopics {
		n, err := c.cfg.Admin.Partitions(ctx, t)
		if err != nil {
			return fmt.Errorf("kstate: output topic %q of Topology.Output.EmitTo (create it before Run): %w", t, err)
		}
		c.topicPartitions[t] = n
	}
	if err := c.ensureRepartition(ctx, n); err != nil {
		return err
	}
	// The create is not abandoned when a sibling pipeline's failure
	// cancels ctx: a create request cancelled in flight can reach the
	// broker after DropCreatedChangelog's delete and leave the topic
	// behind. Waiting for its answer (10 s at most) keeps them ordered.
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	err = c.cfg.Admin.EnsureChangelog(cctx, c.cfg.ChangelogTopic, n)
	cancel()
	if err != nil {
		return fmt.Errorf("kstate: changelog topic (must be compacted, with the %d partitions of input topic %q): %w", n, c.cfg.Topic, err)
	}
	if missing {
		c.createdChangelog.Store(true)
		c.log.Info("changelog topic created", "changelog", c.cfg.ChangelogTopic, "partitions", n)
	}
	if c.cfg.CheckTopics != nil {
		if err := c.cfg.CheckTopics(ctx); err != nil {
			return err
		}
	}
	c.loadDeleteRetention(ctx)
	if c.cfg.RunToEnd {
		if err := c.captureEnds(ctx); err != nil {
			return err
		}
		if !c.cfg.BoundedNeedsTasks {
			// Nothing but input to process: if the group is at the
			// ends already, return without joining.
			done, err := c.reachedEnd(ctx, true)
			if err != nil {
				return err
			}
			if done {
				c.bnd.ended = true
				c.log.Info("bounded run: the group's committed offsets are at the input's end offsets already: nothing to do", "ends", c.bnd.ends)
				return nil
			}
		}
	}
	if c.cfg.DeadLetterTopic != "" {
		if c.dlqPartitions, err = c.cfg.Admin.EnsureDeadLetter(ctx, c.cfg.DeadLetterTopic, n); err != nil {
			return fmt.Errorf("kstate: dead-letter topic %q: %w", c.cfg.DeadLetterTopic, err)
		}
		if c.dlqPartitions <= 0 {
			return fmt.Errorf("kstate: dead-letter topic %q has %d partitions", c.cfg.DeadLetterTopic, c.dlqPartitions)
		}
	}
	s, err := c.cfg.NewSession()
	if err != nil {
		return fmt.Errorf("kstate: %w", err)
	}
	c.setSession(s)
	return nil
}

// shutdown closes every task (processor Close, shard Close; restores are
// cancelled), then the session (leaving the group unless static; a static
// member too when graceful and LeaveGroupOnShutdown is set).
func (c *Coordinator) shutdown(graceful bool) error {
	c.standby.stop()
	c.mu.Lock()
	var parts []int32
	for p := range c.mu.slots {
		parts = append(parts, p)
	}
	c.mu.Unlock()
	sort.Slice(parts, func(i, j int) bool { return parts[i] < parts[j] })
	err := c.closeTasks(parts, "shutdown")
	if c.cfg.BeforeSessionClose != nil {
		c.cfg.BeforeSessionClose(graceful)
	}
	if c.session != nil {
		c.closeSession(graceful)
	}
	c.log.Info("stopped")
	return err
}

// closeSession closes the session, or leaves the group for good on a
// graceful shutdown with LeaveGroupOnShutdown. A failed leave is only
// logged: everything is committed or aborted by now, and the member then
// leaves when its session times out, as without the option.
func (c *Coordinator) closeSession(graceful bool) {
	l, ok := c.session.(GroupLeaver)
	if !graceful || !c.cfg.LeaveGroupOnShutdown || !ok {
		c.session.Close()
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), c.cfg.ShutdownTimeout)
	defer cancel()
	if err := l.Leave(ctx); err != nil {
		c.log.Warn("could not leave the group on shutdown: the member stays until its session times out", "instance", c.cfg.InstanceID, "err", err)
		return
	}
	c.log.Info("left the group", "instance", c.cfg.InstanceID)
}

// failed returns the first error of a restore goroutine.
func (c *Coordinator) failed() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.mu.err
}

func (c *Coordinator) fail(err error) {
	c.mu.Lock()
	if c.mu.err == nil {
		c.mu.err = err
	}
	c.mu.Unlock()
}

// kafkaErr wraps an error of the session. The session's errors name the
// operation and the transactional id already; what is added only where
// they do not (a fenced instance, whose chain is long and says little).
func (c *Coordinator) kafkaErr(what string, err error) error {
	if errors.Is(err, ErrFenced) {
		return &fencedError{what: what, instance: c.cfg.InstanceID, app: c.cfg.ApplicationID, err: err}
	}
	return fmt.Errorf("kstate: %w", err)
}

// fencedError says which instance was fenced, once; the broker's errors
// stay in the chain (errors.Is(err, ErrFenced)) without being repeated.
type fencedError struct {
	what, instance, app string
	err                 error
}

func (e *fencedError) Error() string {
	return fmt.Sprintf("kstate: instance %q of application %q was fenced by a newer instance with the same instance id during %s: stopping; "+
		"give every running instance its own InstanceID", e.instance, e.app, e.what)
}

func (e *fencedError) Unwrap() error { return e.err }

func (c *Coordinator) retire(add Counters) {
	c.mu.Lock()
	c.mu.retired.Add(add)
	c.mu.Unlock()
}

// flushIdle writes the shards' committed batches kept in memory
// (write-behind, shard.Flush) to their stores once a poll brought nothing:
// an idle application's state directory then holds everything committed
// (state readers, kstate state --state-dir) instead of lagging until the
// next batch. A failed write fails the coordinator like a failed local
// commit: Kafka has the batches, a restart restores them.
func (c *Coordinator) flushIdle() error {
	for _, s := range c.readyTasks() {
		if s.task.Shard().InBatch() {
			continue
		}
		if err := s.task.Shard().Flush(); err != nil {
			return fmt.Errorf("kstate: partition %d: %w", s.part, err)
		}
	}
	return nil
}
