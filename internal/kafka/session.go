package kafka

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/balancer"
	"github.com/kstate/kstate/internal/startup"

	"github.com/twmb/franz-go/pkg/kgo"
)

// SessionConfig configures a Session. The zero value of every optional field
// works; defaults are documented on the fields.
type SessionConfig struct {
	Brokers []string // required
	GroupID string   // required; the application id
	Topics  []string // required; the input topics

	// CoPartitioned makes the group give partition p of every topic of
	// Topics to the same member (several input topics of one task): the
	// range balancer instead of the cooperative-sticky one, so a
	// rebalance revokes every partition (eager). Default false.
	CoPartitioned bool

	// InstanceID enables static group membership (KIP-345): a member that
	// restarts within SessionTimeout keeps its partitions without a
	// rebalance, and Close does not leave the group (Leave does). Empty:
	// dynamic member.
	InstanceID string

	// TransactionalID defaults to GroupID + "-" + InstanceID, or, without
	// an InstanceID, to GroupID + "-" + a random suffix. It must be unique
	// per live member. A stable id makes a restarted instance fence its
	// zombie at once; a random one is still safe (KIP-447 fences zombies
	// through the group generation), the zombie's open transaction just
	// lives until TransactionTimeout.
	TransactionalID string

	// TransactionTimeout, overriding the default 10s, is how long the
	// broker lets a transaction stay open before aborting it (and fencing
	// its producer). A batch must finish within it. Keep it at or below
	// SessionTimeout: a member that hangs after its last heartbeat then has
	// its transaction aborted before the group gives its partitions away.
	TransactionTimeout time.Duration

	// SessionTimeout, overriding the default 10s, is how long the group
	// waits for a silent member before rebalancing its partitions away.
	// It must lie within the broker's group.{min,max}.session.timeout.ms
	// (Kafka's default minimum is 6s). Heartbeats go out every third of it,
	// at most every 3s.
	SessionTimeout time.Duration
	// CloseJoinGrace is how long Close waits for a group join in flight
	// before abandoning it (see Close). Optional; default one heartbeat
	// interval and a second.
	CloseJoinGrace time.Duration
	// TxnSettle is how long after End returned the next transaction's
	// first produce waits (see settle). Optional; default
	// DefaultTxnSettle; negative: no wait.
	TxnSettle time.Duration

	// RebalanceTimeout, overriding franz-go's default 60s, is how long the
	// group waits for members to rejoin during a rebalance.
	RebalanceTimeout time.Duration

	// FetchMaxWait, overriding the default 500ms, bounds how long Poll
	// waits when no records are available (and how long a broker holds an
	// empty fetch). It is the idle tick of the engine loop.
	FetchMaxWait time.Duration

	// OnAssigned, OnRevoked and OnLost are called from Poll, on the
	// caller's goroutine, before Poll returns the records of a newly
	// assigned partition and never with a batch of the Session open
	// between Poll calls. Lost means the member was kicked out (session
	// timeout, fencing): the partitions may already be processed by
	// another member. A transaction open when partitions are revoked or
	// lost always aborts (End returns committed=false), and Poll never
	// returns records of a partition after reporting it revoked or lost.
	// franz-go's own revoke has completed by then (the callbacks do not
	// hold up the rebalance): the new owner is kept from our uncommitted
	// work by the abort, KIP-447 stable offsets and read_committed, not by
	// waiting for us. OnLost nil: OnRevoked is called instead. Every
	// revoke is reported, also one that franz-go's transact session does
	// not pass on (a second rebalance before End; revokes.go).
	OnAssigned, OnRevoked, OnLost func(ctx context.Context, parts []Partition)

	// PauseAssigned pauses every newly assigned partition inside
	// franz-go's assignment callback, which runs before the partition's
	// committed offset is fetched and so before any fetch for it: Poll
	// returns none of its records until the caller Resumes it (once its
	// state is ready). Without it, the Poll that reports a partition
	// assigned may already return records of it. Default false.
	PauseAssigned bool

	// MaxRecordBytes, overriding DefaultMaxRecordBytes, bounds the size of
	// one produced record as RecordBatchBytes measures it. Produce fails a
	// larger record with a *RecordTooLargeError before sending anything. It
	// must not exceed the max.message.bytes of the topics produced to (the
	// broker would reject larger batches).
	MaxRecordBytes int

	// StartupTimeout, overriding the default 60s, is how long the first
	// Poll keeps retrying to load the producer id while the cluster is
	// unreachable (a pod started before Kafka), logging each retry at Warn.
	StartupTimeout time.Duration

	// Logger receives the session's notable events (rebalance errors that
	// are retried, aborts, franz-go warnings). Default: discard.
	Logger *slog.Logger

	// Process is the application instance this member runs in: the
	// pipelines of one Run (instance ids "<InstanceID>" and
	// "<InstanceID>-p<i>") share it and their state directory, so the
	// balancer counts a process's local shards for each of its pipelines
	// and places no standby in the process holding the partition active.
	// Default InstanceID (without one, the member is its own process).
	Process string
	// Addr is the member's advertised URL for live queries, carried in
	// its join metadata to every member's View. Default "": none.
	Addr string
	// ChangelogTopic is the changelog whose partition p is shard p: the
	// leader reads its end offsets to know how far each local copy is
	// behind. Default "": the balancer is sticky and balanced only.
	ChangelogTopic string
	// Standbys is how many members of other processes keep a standby copy
	// of each partition (fewer when there are fewer processes). Default 0.
	Standbys int
	// AcceptableLag, overriding DefaultAcceptableLag (when 0), is how many
	// changelog records behind a copy may be and count as caught up: a
	// partition goes active only to a caught-up copy while one exists, and
	// a warm-up copy takes its partition over once within it.
	AcceptableLag int64
	// ProbingInterval, overriding DefaultProbingInterval, is how often the
	// members force a rebalance, all at once, while warm-ups exist in the
	// group (groupview.go).
	ProbingInterval time.Duration
	// LocalShards returns the changelog position (the next offset to read)
	// of every shard this member's process holds locally, active, standby
	// or closed, reported as the member joins; called on franz-go's group
	// goroutine, so it must be quick and safe from any goroutine. Nil:
	// none.
	LocalShards func() map[int32]int64
	// OnStandby is called from Poll, under OnAssigned's rules and after
	// the assigned and revoked callbacks of the same Poll, with the
	// member's full set of standby and warm-up partitions (partition
	// numbers, sorted; a partition held active is left out) whenever it
	// changed; empty when none remain. Optional.
	OnStandby func(ctx context.Context, parts []int32)

	// previousRelease makes the session join as the release before
	// kstate's balancer did (only its cooperative-sticky or range
	// protocol): the tests of a group mixing releases.
	previousRelease bool

	// Client holds TLS, SASL and extra franz-go options for the session's
	// clients (its own and Leave's). Its Brokers is ignored: Brokers above
	// is used. The session's own options are applied after Client.Extra.
	Client ClientConfig
}

// Session is one member of a consumer group doing exactly-once
// consume-transform-produce. It wraps kgo.GroupTransactSession, the only
// franz-go API that commits group offsets inside a transaction.
//
// State machine, driven from one goroutine:
//
//	Poll* → Begin → (Poll | Produce)* → End(commit) → committed: offsets of all
//	                                                  polled records + produced
//	                                                  records are visible
//	                                  → End(abort)  → nothing visible; consumption
//	                                  (or commit     rewinds to the last committed
//	                                  after a        offsets: the next Poll returns
//	                                  rebalance)     the same records again
//
// Every rebalance aborts the transaction open at that moment, even on a
// member that loses nothing; that is normal, cheap and correct. Errors from
// Begin, Produce and End are not retryable: close the Session and build a new
// one (ErrFenced: stop, a newer instance took over).
//
// Poll, Begin, Produce, ProduceAsync and End must not be called
// concurrently with each other, and End must wait for every ProduceAsync's
// done. Close may be called from another goroutine to unblock Poll.
type Session struct {
	cfg SessionConfig
	log *slog.Logger
	gts *kgo.GroupTransactSession
	// cancel cancels the client's context (kgo.WithContext): Close uses it
	// to stop waiting for a group join that cannot complete.
	cancel context.CancelFunc

	fence *generationFence

	created time.Time // for StartupTimeout

	// mustAbort is set when Poll consumed records it could not return (it
	// failed); the next End aborts, rewinding past them, so they are never
	// committed unprocessed.
	mustAbort atomic.Bool
	// abortWatch is the client's logger, which sees franz-go turn End's
	// commit into an abort without saying so but in its log
	// (emptyabort.go).
	abortWatch *emptyAbortWatch
	// txnTopics holds the topics the open transaction produced to, for
	// End to purge from the producer after such an abort (emptyabort.go).
	txnTopics struct {
		sync.Mutex
		m map[string]struct{}
	}

	inTxn  atomic.Bool
	closed atomic.Bool
	// connFailed is when a connection to a broker last failed, to open or
	// once established (UnixNano; connHook); watch records when the open
	// transaction began and whether the process ran and waited on Kafka
	// during it: wrapTxnErr reads a fence with both (txnwatch.go).
	connFailed atomic.Int64
	watch      txnWatch
	// ended is when the last End returned (time since created; 0 before
	// the first End); settled is set once the open transaction's first
	// produce waited for it (settle; under settleMu).
	ended    atomic.Int64
	settleMu sync.Mutex
	settled  bool
	// producerReady is set once the transactional producer id is loaded
	// (see Poll).
	producerReady atomic.Bool
	once          sync.Once

	// owned is the set of partitions reported assigned to the caller; only
	// touched on the Poll goroutine.
	owned map[Partition]struct{}
	// client is gts's client, for the group goroutine's callbacks (which
	// may run before NewSession stored gts).
	client atomic.Pointer[kgo.Client]
	// grp is the group as this member sees it (groupview.go);
	// standbyDelivered the standby partitions last given to OnStandby
	// (Poll goroutine).
	grp              groupState
	standbyDelivered []int32

	// hwm is the high watermark of each partition as of the last fetch
	// that returned it (HighWatermark); only touched on the Poll goroutine.
	hwm map[Partition][2]int64

	// mu guards events queued by franz-go's group goroutine for delivery on
	// the Poll goroutine (see enqueue for why they are not delivered at
	// once), and queued, the partitions that the queue, once delivered,
	// leaves assigned (revokes.go).
	mu struct {
		sync.Mutex
		events []groupEvent
		queued map[Partition]struct{}
	}
}

type eventKind int

const (
	evAssigned eventKind = iota
	evRevoked
	evLost
)

func (k eventKind) String() string {
	return [...]string{"assigned", "revoked", "lost"}[k]
}

type groupEvent struct {
	kind  eventKind
	parts []Partition
	// missed: a revoke franz-go did not report, found by reconcile
	// (revokes.go).
	missed bool
}

// Defaults of SessionConfig. kstate.Options uses the first two as its own
// defaults; they are declared only here.
const (
	DefaultTransactionTimeout = 10 * time.Second
	DefaultSessionTimeout     = 10 * time.Second
	defaultFetchMaxWait       = 500 * time.Millisecond
	DefaultStartupTimeout     = 60 * time.Second
)

const (
	// defaultBrokerMaxWriteBytes is franz-go's default (and Kafka's
	// socket.request.max.bytes): a produce request, of many batches, is at
	// most this large.
	defaultBrokerMaxWriteBytes = 100 << 20
	// requestSlack is room for a produce request's headers around one
	// batch of MaxRecordBytes.
	requestSlack = 1 << 20
)

// sessionFetchMaxBytes bounds one input fetch response, overriding
// franz-go's 50 MiB. A fetch takes up to 1 MiB per partition
// (FetchMaxPartitionBytes), so with the default the buffered fetch, and the
// records decoded from it, grew with the partitions an instance owns: at 64
// partitions of the peer harness's count, franz-go's fetch bodies and
// decoded records were 148 of a pipeline process's 332 MB of live heap
// (issue #29, many partitions). 4 MiB (8 MiB until session 24) is about
// 40k records of 100 bytes, two of the largest adaptive batches (20000
// records); up to 4 partitions nothing changes. A pipeline holds about
// three responses (one in flight, one buffered, one whose records the
// batch references): 4 MiB took the harness's 64-partition peak RSS from
// 652 to 614 MB with no loss of throughput, and the count backlog's from
// 282 to 272 MB (docs/BENCHMARKS.md, many partitions). A record batch
// larger than this is still returned whole (Kafka returns the first batch
// of a fetch whatever its size).
const sessionFetchMaxBytes = 4 << 20

// NewSession validates cfg and starts a group member. Joining the group
// happens in the background; partitions arrive through OnAssigned in Poll.
func NewSession(cfg SessionConfig) (*Session, error) {
	switch {
	case len(cfg.Brokers) == 0:
		return nil, errors.New("kafka: SessionConfig.Brokers is empty")
	case cfg.GroupID == "":
		return nil, errors.New("kafka: SessionConfig.GroupID is empty")
	case len(cfg.Topics) == 0:
		return nil, errors.New("kafka: SessionConfig.Topics is empty")
	}
	if cfg.TransactionalID == "" {
		suffix := cfg.InstanceID
		if suffix == "" {
			var b [8]byte
			_, _ = rand.Read(b[:])
			suffix = hex.EncodeToString(b[:])
		}
		cfg.TransactionalID = cfg.GroupID + "-" + suffix
	}
	if cfg.TransactionTimeout <= 0 {
		cfg.TransactionTimeout = DefaultTransactionTimeout
	}
	if cfg.SessionTimeout <= 0 {
		cfg.SessionTimeout = DefaultSessionTimeout
	}
	if cfg.FetchMaxWait <= 0 {
		cfg.FetchMaxWait = defaultFetchMaxWait
	}
	if cfg.MaxRecordBytes <= 0 {
		cfg.MaxRecordBytes = DefaultMaxRecordBytes
	}
	if cfg.StartupTimeout <= 0 {
		cfg.StartupTimeout = DefaultStartupTimeout
	}
	if cfg.TxnSettle == 0 {
		cfg.TxnSettle = DefaultTxnSettle
	}
	if cfg.Process == "" {
		cfg.Process = cfg.InstanceID
	}
	if cfg.AcceptableLag == 0 {
		cfg.AcceptableLag = DefaultAcceptableLag
	}
	if cfg.ProbingInterval <= 0 {
		cfg.ProbingInterval = DefaultProbingInterval
	}
	s := &Session{cfg: cfg, log: cfg.Logger, created: time.Now(), owned: make(map[Partition]struct{}), fence: newGenerationFence()}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}

	s.abortWatch = &emptyAbortWatch{log: s.log, txnID: cfg.TransactionalID}

	cctx, cancel := context.WithCancel(context.Background())
	s.cancel = cancel
	// The fetch bound first, so that Client.Extra can override it.
	opts := append([]kgo.Opt{kgo.FetchMaxBytes(sessionFetchMaxBytes)}, cfg.clientConfig().Opts()...)
	opts = append(opts,
		kgo.WithContext(cctx),
		kgo.ConsumerGroup(cfg.GroupID),
		kgo.ConsumeTopics(cfg.Topics...),
		kgo.TransactionalID(cfg.TransactionalID),
		kgo.TransactionTimeout(cfg.TransactionTimeout),
		kgo.SessionTimeout(cfg.SessionTimeout),
		kgo.HeartbeatInterval(heartbeatInterval(cfg.SessionTimeout)),
		kgo.FetchMaxWait(cfg.FetchMaxWait),
		// Only committed input: an aborted upstream batch must never feed
		// state. (Stable offset fetches, KIP-447, are always on in this
		// franz-go version; RequireStableFetchOffsets is a no-op. Auto
		// commit is off for any transactional client.)
		kgo.FetchIsolationLevel(kgo.ReadCommitted()),
		kgo.Balancers(s.balancers()...),
		kgo.RecordPartitioner(newPartitioner()),
		kgo.MetadataMinAge(clientMetadataMinAge),
		// Produce and ProduceAsync hand over whole batches or chunks of
		// them, and End waits for them: lingering cannot gather more
		// records, it only adds latency.
		kgo.ProducerLinger(0),
		// Produce checks every record against MaxRecordBytes first (with a
		// clear error); franz-go's own check, of the same size plus the
		// bytes it counts in addition, then never fails first. Its default
		// (1,000,012 bytes) would cap records below what the topic allows.
		kgo.ProducerBatchMaxBytes(int32(cfg.MaxRecordBytes+kgoBatchExtra)),
		kgo.BrokerMaxWriteBytes(int32(max(defaultBrokerMaxWriteBytes, cfg.MaxRecordBytes+kgoBatchExtra+requestSlack))),
		kgo.OnPartitionsAssigned(func(_ context.Context, cl *kgo.Client, m map[string][]int32) {
			if cfg.PauseAssigned {
				// Only a lock of the consumer's pause set: safe on the
				// group goroutine, and done before franz-go fetches the
				// partitions' offsets and starts fetching them.
				cl.PauseFetchPartitions(m)
			}
			s.enqueue(evAssigned, m)
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.enqueue(evRevoked, m) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, m map[string][]int32) { s.enqueue(evLost, m) }),
		kgo.OnOffsetsFetched(s.fence.onFetched),
		kgo.WithLogger(s.abortWatch),
		kgo.WithHooks(connHook{s}),
	)
	if cfg.InstanceID != "" {
		opts = append(opts, kgo.InstanceID(cfg.InstanceID))
	}
	if cfg.RebalanceTimeout > 0 {
		opts = append(opts, kgo.RebalanceTimeout(cfg.RebalanceTimeout))
	}
	gts, err := kgo.NewGroupTransactSession(opts...)
	if err == nil {
		// Exactly-once rests on acks=all and idempotence: franz-go
		// forces both for a transactional client today; assert it.
		if err = checkGuarantees(gts.Client()); err != nil {
			gts.Close()
		}
	}
	if err != nil {
		cancel()
		return nil, fmt.Errorf("kafka: new session for group %q: %w", cfg.GroupID, err)
	}
	s.gts = gts
	s.client.Store(gts.Client())
	go s.watch.run(cctx)
	return s, nil
}

// TransactionalID is the id the session's producer uses (after defaults).
func (s *Session) TransactionalID() string { return s.cfg.TransactionalID }

// enqueue runs on franz-go's group goroutine, inside GroupTransactSession's
// callback wrapper, which holds the lock End needs. Calling user code here
// would let a callback that waits for the engine's batch deadlock with the
// engine's End; so the event is only queued and delivered on the next Poll.
// Deferring is safe: the wrapper has already marked the transaction to
// abort, and the new owner of a revoked partition cannot read our pending
// offsets (KIP-447 stable offsets) nor our uncommitted changelog records
// (read_committed) until our abort completes.
func (s *Session) enqueue(kind eventKind, m map[string][]int32) {
	var parts []Partition
	for topic, ps := range m {
		for _, p := range ps {
			parts = append(parts, Partition{Topic: topic, Partition: p})
		}
	}
	if len(parts) == 0 {
		return
	}
	sortPartitions(parts)
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.mu.queued == nil {
		s.mu.queued = make(map[Partition]struct{})
	}
	if kind != evAssigned {
		// Only what is still assigned: reconcile may have revoked
		// some already.
		parts = slices.DeleteFunc(parts, func(p Partition) bool {
			_, ok := s.mu.queued[p]
			return !ok
		})
		if len(parts) == 0 {
			return
		}
	}
	if kind == evAssigned {
		s.fence.assigned(parts)
		for _, p := range parts {
			s.mu.queued[p] = struct{}{}
		}
	} else {
		s.fence.forget(parts)
		for _, p := range parts {
			delete(s.mu.queued, p)
		}
	}
	s.mu.events = append(s.mu.events, groupEvent{kind: kind, parts: parts})
}

// deliver calls the user's callbacks for queued group events, in order.
func (s *Session) deliver(ctx context.Context) {
	for !s.closed.Load() {
		s.mu.Lock()
		events := s.mu.events
		s.mu.events = nil
		s.mu.Unlock()
		if len(events) == 0 {
			return
		}
		for _, ev := range events {
			if ev.missed {
				s.log.Info("partitions revoked (found at the group join: a second rebalance before the transaction ended)",
					"group", s.cfg.GroupID, "partitions", ev.parts)
			} else {
				s.log.Info("partitions "+ev.kind.String(), "group", s.cfg.GroupID, "partitions", ev.parts)
			}
			var fn func(context.Context, []Partition)
			switch ev.kind {
			case evAssigned:
				for _, p := range ev.parts {
					s.owned[p] = struct{}{}
				}
				fn = s.cfg.OnAssigned
			case evRevoked, evLost:
				for _, p := range ev.parts {
					delete(s.owned, p)
				}
				fn = s.cfg.OnRevoked
				if ev.kind == evLost && s.cfg.OnLost != nil {
					fn = s.cfg.OnLost
				}
			}
			if fn != nil {
				fn(ctx, ev.parts)
			}
		}
	}
}

// Poll returns up to maxRecords records (all buffered ones when
// maxRecords <= 0), waiting at most FetchMaxWait or until ctx is done. Group
// callbacks run inside Poll (see SessionConfig.OnAssigned). Rebalance errors
// are logged and retried by franz-go; only fatal errors are returned: ctx's
// error, ErrClosed, ErrFenced, authorization and other non-retryable errors.
//
// When the first poll only drained an already-buffered fetch (stale by
// up to one loop iteration) and returned fewer than maxRecords, Poll waits
// up to freshPollWait more for the fetch that drain sent (pollFresh, poll.go).
//
// Every record Poll returns counts as consumed: the next End(commit) commits
// its offset. Process all of them in the transaction, or End(abort) to get
// them again. (Records a failed Poll consumed but did not return make the
// next End abort.)
func (s *Session) Poll(ctx context.Context, maxRecords int) ([]Record, error) {
	return s.PollInto(ctx, maxRecords, nil)
}

// PollInto is Poll appending the records to dst[:0] (a new array if dst is
// too small), an array the caller may reuse from poll to poll (issue #13).
// The records are the engine's Message (Record is that type), built once
// from franz-go's: the engine takes them as they are.
func (s *Session) PollInto(ctx context.Context, maxRecords int, dst []Record) ([]Record, error) {
	if s.closed.Load() {
		return nil, ErrClosed
	}
	if !s.producerReady.Load() {
		// Load the transactional producer id now rather than at the first
		// produce: InitProducerId fences a predecessor with the same
		// transactional id and aborts its open transaction at once. Until
		// then that transaction's pending offset commit makes every
		// RequireStable offset fetch (the group's, and the engine's before
		// restoring) wait for the transaction timeout.
		if err := s.initProducerID(ctx); err != nil {
			return nil, err
		}
		s.producerReady.Store(true)
	}
	fetches := s.pollFresh(ctx, maxRecords, freshPollWait)

	s.deliver(ctx)
	s.deliverStandby(ctx)
	fail := func(err error) ([]Record, error) {
		if fetches.NumRecords() > 0 {
			s.mustAbort.Store(true)
		}
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return fail(err)
	}
	for _, fe := range fetches.Errors() {
		if err := s.classifyPollError(fe); err != nil {
			return fail(err)
		}
	}

	s.noteHighWatermarks(fetches)
	recs := dst[:0]
	if n := fetches.NumRecords(); cap(recs) < n {
		recs = make([]Record, 0, n)
	}
	fetches.EachRecord(func(r *kgo.Record) {
		if _, ok := s.owned[Partition{r.Topic, r.Partition}]; ok {
			recs = append(recs, fromKgo(r))
		}
	})
	return recs, nil
}

// initProducerID loads the producer id, retrying with backoff while the
// cluster is unreachable, for StartupTimeout since the session was created.
func (s *Session) initProducerID(ctx context.Context) error {
	out, err := startup.Retry{
		Max:         initBackoffMax,
		Unreachable: func(err error) bool { return ctx.Err() == nil && IsUnreachable(err) },
		Expired:     func(delay time.Duration) bool { return time.Since(s.created)+delay > s.cfg.StartupTimeout },
		Sleep:       startup.Sleep,
		Warn: func(delay time.Duration, err error) {
			s.log.Warn(startup.WarnMessage, "what", "init producer id", "brokers", s.cfg.Brokers, "retry_in", delay,
				"waited", time.Since(s.created).Round(time.Millisecond), "startup_timeout", s.cfg.StartupTimeout, "err", err)
		},
	}.Do(ctx, func(ctx context.Context) error {
		_, _, err := s.gts.Client().ProducerID(ctx)
		return err
	})
	switch {
	case err == nil:
		return nil
	case out == startup.Interrupted || ctx.Err() != nil:
		return ctx.Err()
	}
	return s.wrapTxnErr("init producer id", "", err)
}

// initBackoffMax caps the backoff of the producer init's retries, at
// start-up and when the coordinator rejoins after the broker went away
// (2 s: a rejoin resumes within that of the broker's return).
const initBackoffMax = 2 * time.Second

// Pause stops fetching the given partitions until Resume; records already
// buffered for them are not returned by Poll either.
func (s *Session) Pause(parts []Partition) {
	s.gts.Client().PauseFetchPartitions(toMap(parts))
}

// Resume undoes Pause.
func (s *Session) Resume(parts []Partition) {
	s.gts.Client().ResumeFetchPartitions(toMap(parts))
}

// Begin opens a transaction.
func (s *Session) Begin() error {
	if s.closed.Load() {
		return ErrClosed
	}
	if err := s.gts.Begin(); err != nil {
		return s.wrapTxnErr("begin transaction", "", err)
	}
	s.settleMu.Lock()
	s.settled = false
	s.settleMu.Unlock()
	s.watch.begin(time.Now())
	s.inTxn.Store(true)
	return nil
}

// DefaultTxnSettle is SessionConfig.TxnSettle's default. On this project's
// single-broker benchmark at 5,000 records/s it cut the produces that met
// the previous transaction still completing from about one in ten to
// under one in a hundred (docs/benchmarks/history.md, "Issue #13's
// eleventh session").
const DefaultTxnSettle = 4 * time.Millisecond

// settle delays the first produce of a transaction until TxnSettle after
// the previous End returned, if it comes sooner.
//
// Why: End returns once the transaction coordinator has logged the commit
// (PrepareCommit); it then writes the markers to every partition of the
// transaction and only after that completes the transaction. A produce of
// the next transaction that reaches the broker before then finds the
// transactional id busy: with transactions version 2 (Kafka 4), the
// partition leader's implicit AddPartitionsToTxn gets
// CONCURRENT_TRANSACTIONS and the broker retries it after
// add.partitions.to.txn.retry.backoff.ms (20 ms by default); older brokers
// return the error to franz-go's own AddPartitionsToTxn, which retries
// too. At a low input rate the next batch is often ready within a
// millisecond or two of End, and one produce in ten paid those 20 ms: the
// tail of the end-to-end latency. Waiting out the markers costs a
// fraction of that. A batch that takes longer than TxnSettle to process
// (a backlog) never waits.
func (s *Session) settle(ctx context.Context) {
	if s.cfg.TxnSettle < 0 {
		return
	}
	s.settleMu.Lock()
	defer s.settleMu.Unlock()
	if s.settled {
		return
	}
	s.settled = true
	ended := s.ended.Load()
	if ended == 0 {
		return
	}
	wait := time.Duration(ended) + s.cfg.TxnSettle - time.Since(s.created)
	if wait <= 0 {
		return
	}
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}

// Produce writes recs in the open transaction, waits until the broker has
// them all, and returns their offsets in order. After an error the
// transaction can only be aborted. recs is not kept: the caller may reuse
// it once Produce returned.
func (s *Session) Produce(ctx context.Context, recs []Record) ([]int64, error) {
	if !s.inTxn.Load() {
		return nil, ErrNotInTransaction
	}
	if len(recs) == 0 {
		return nil, nil
	}
	if err := s.checkRecords(recs); err != nil {
		return nil, err
	}
	s.settle(ctx)
	krs := toKgos(recs)
	ptrs := make([]*kgo.Record, len(krs))
	for i := range krs {
		ptrs[i] = &krs[i]
	}
	// ProduceSync returns its results in completion order (partition by
	// partition), not input order; but it sets Offset on the records we
	// passed, so the offsets are read back from krs in input order.
	s.watch.enter(time.Now())
	results := s.gts.ProduceSync(ctx, ptrs...)
	s.watch.leave(time.Now())
	for _, r := range results {
		if r.Err != nil {
			what := fmt.Sprintf("produce to topic %q partition %d", r.Record.Topic, r.Record.Partition)
			return nil, s.wrapTxnErr(what, r.Record.Topic, r.Err)
		}
	}
	offsets := make([]int64, len(krs))
	for i, kr := range krs {
		offsets[i] = kr.Offset
	}
	return offsets, nil
}

// ProduceAsync hands recs to the producer in the open transaction, after
// the records of earlier calls, and returns without waiting for the broker
// (it blocks only while franz-go's buffer of unacknowledged records is
// full, or while a transaction's first produce waits for the previous
// transaction's markers: settle). done is called once, on one of
// franz-go's goroutines or before ProduceAsync returns, when every record
// is acknowledged: with their offsets in order, or with the first error
// (the transaction can then only be aborted). End must not be called
// before every done ran. recs is not kept (franz-go gets copies): the
// caller may reuse it once ProduceAsync returned.
func (s *Session) ProduceAsync(ctx context.Context, recs []Record, done func(offsets []int64, err error)) {
	if !s.inTxn.Load() {
		done(nil, ErrNotInTransaction)
		return
	}
	if len(recs) == 0 {
		done(nil, nil)
		return
	}
	if err := s.checkRecords(recs); err != nil {
		done(nil, err)
		return
	}
	s.settle(ctx)
	krs := toKgos(recs)
	s.watch.enter(time.Now())
	userDone := done
	done = func(offsets []int64, err error) {
		s.watch.leave(time.Now())
		userDone(offsets, err)
	}
	pg := &pendingProduce{left: int64(len(krs))}
	promise := func(r *kgo.Record, err error) {
		if err != nil {
			pg.mu.Lock()
			if pg.mu.err == nil {
				what := fmt.Sprintf("produce to topic %q partition %d", r.Topic, r.Partition)
				pg.mu.err = s.wrapTxnErr(what, r.Topic, err)
			}
			pg.mu.Unlock()
		}
		if atomic.AddInt64(&pg.left, -1) > 0 {
			return
		}
		// The last promise: franz-go set every record's Offset before
		// calling its promise, and the atomic countdown orders those
		// writes before these reads.
		pg.mu.Lock()
		err = pg.mu.err
		pg.mu.Unlock()
		if err != nil {
			done(nil, err)
			return
		}
		offsets := make([]int64, len(krs))
		for i := range krs {
			offsets[i] = krs[i].Offset
		}
		done(offsets, nil)
	}
	for i := range krs {
		s.gts.Produce(ctx, &krs[i], promise)
	}
}

// checkRecords checks the size of each of recs, and adds their topics to
// the open transaction's (taking the lock once per call: a call's records
// go to a few topics, interleaved).
func (s *Session) checkRecords(recs []Record) error {
	var (
		topics [8]string
		n      int
		last   string
	)
	for i := range recs {
		r := &recs[i]
		if err := CheckRecordSize(r.Topic, r.Partition, r.Key, r.Value, r.Headers, s.cfg.MaxRecordBytes); err != nil {
			return err
		}
		if r.Topic == last || slices.Contains(topics[:n], r.Topic) {
			continue
		}
		last = r.Topic
		if n == len(topics) {
			s.noteTxnTopics(topics[:n]...)
			n = 0
		}
		topics[n] = last
		n++
	}
	s.noteTxnTopics(topics[:n]...)
	return nil
}

// noteTxnTopics adds topics to the open transaction's.
func (s *Session) noteTxnTopics(topics ...string) {
	s.txnTopics.Lock()
	defer s.txnTopics.Unlock()
	if s.txnTopics.m == nil {
		s.txnTopics.m = make(map[string]struct{})
	}
	for _, t := range topics {
		s.txnTopics.m[t] = struct{}{}
	}
}

// endTxnTopics clears the ending transaction's topics and returns them
// when want is set (sorted).
func (s *Session) endTxnTopics(want bool) []string {
	s.txnTopics.Lock()
	defer s.txnTopics.Unlock()
	var topics []string
	if want {
		topics = slices.Sorted(maps.Keys(s.txnTopics.m))
	}
	clear(s.txnTopics.m)
	return topics
}

// pendingProduce counts a ProduceAsync's unacknowledged records.
type pendingProduce struct {
	left int64
	mu   struct {
		sync.Mutex
		err error
	}
}

// End ends the open transaction. With commit it tries to commit the
// produced records and the offsets of everything polled since the last End;
// committed=false with a nil error means the transaction was aborted
// (because commit was false, or a rebalance intervened) and consumption was
// rewound to the last committed offsets: process the records again.
func (s *Session) End(ctx context.Context, commit bool) (committed bool, err error) {
	if !s.inTxn.Load() {
		return false, ErrNotInTransaction
	}
	if s.mustAbort.Swap(false) && commit {
		s.log.Warn("aborting instead of committing: a failed poll consumed records it did not return", "group", s.cfg.GroupID)
		commit = false
	}
	if commit {
		ctx = kgo.PreTxnCommitFnContext(ctx, s.fence.preCommit)
	}
	s.abortWatch.seen.Store(false)
	s.abortWatch.abortSent.Store(false)
	s.watch.enter(time.Now())
	committed, err = s.gts.End(ctx, kgo.TransactionEndTry(commit))
	s.watch.leave(time.Now())
	var settledAborted bool
	if unconfirmed(ctx, err) {
		if !commit || s.abortWatch.abortSent.Load() {
			settledAborted = s.settleAbort(ctx, commit, err)
		} else {
			settledAborted = s.settleUnconfirmed(ctx, s.fence.moves(), err)
		}
	}
	if settledAborted {
		// Found aborted (unconfirmed.go): consumption is rewound; the
		// caller redoes the batch as after a rebalance.
		committed, err = false, nil
	}
	emptyAbort := committed && s.abortWatch.seen.Load()
	topics := s.endTxnTopics(emptyAbort)
	if emptyAbort {
		// The client's produce state for those partitions is off
		// (emptyabort.go): forget it, so the redo starts them afresh.
		s.gts.Client().PurgeTopicsFromProducing(topics...)
		s.log.Warn("transaction aborted instead of committed: franz-go found none of its produced partitions registered and aborted it; consumption rewound and the produced topics reloaded", "group", s.cfg.GroupID, "topics", topics)
		committed = false
	}
	s.ended.Store(int64(max(time.Since(s.created), 1)))
	s.fence.ended(committed && err == nil)
	s.inTxn.Store(false)
	if err != nil {
		return false, s.wrapTxnErr("end transaction", "", err)
	}
	if commit && !committed && !emptyAbort && !settledAborted {
		s.log.Warn("transaction aborted instead of committed (rebalance); consumption rewound", "group", s.cfg.GroupID)
	}
	return committed, nil
}

// Close aborts an open transaction, leaves the group (a static member stays
// in it until its session times out, so a restart keeps its partitions; see
// Leave) and releases the client. Idempotent. Group callbacks are not called during
// Close. Must not run concurrently with Begin, Produce or End.
//
// franz-go's Close first waits for a group join in flight, and a join waits
// for every member of the group to join again: for a member that stopped
// without leaving (a static member, such as another pipeline of the same
// instance that stopped a moment earlier) until its session times out.
// Close waits for the join for closeJoinGrace only (a join among live
// members completes within a heartbeat interval, the time they need to
// notice the rebalance), then cancels the client's context: the join is
// abandoned, and this member stays in the group as a static member does
// after any stop, until it comes back or its session times out. (The join
// request itself has reached the broker by then, so the rebalance goes on
// with this member's new subscription and assigns what it revoked.)
func (s *Session) Close() error {
	s.once.Do(func() {
		s.closed.Store(true)
		s.stopGroup()
		if s.inTxn.Load() {
			ctx, cancel := context.WithTimeout(context.Background(), s.cfg.TransactionTimeout)
			if _, err := s.gts.End(ctx, kgo.TryAbort); err != nil {
				s.log.Warn("close: abort of the open transaction failed", "transactional_id", s.cfg.TransactionalID, "err", err)
			}
			cancel()
			s.inTxn.Store(false)
		}
		done := make(chan struct{})
		go func() {
			s.gts.Close()
			close(done)
		}()
		grace := s.closeJoinGrace()
		t := time.NewTimer(grace)
		select {
		case <-done:
		case <-t.C:
			s.log.Info("close: the group's rebalance waits for a member that has stopped; not waiting for it (this member stays in the group until it comes back or its session times out)",
				"group", s.cfg.GroupID, "instance", s.cfg.InstanceID, "waited", grace)
			s.cancel()
			<-done
		}
		t.Stop()
		s.cancel()
	})
	return nil
}

// Abandon cuts off the session's calls in flight, from any goroutine: it
// cancels the client's context and closes the client, which fails the
// records still buffered for producing (a produce to a broker that is
// down is retried until then: franz-go cannot fail an idempotent batch
// already sent, whatever its context). The open transaction is left to
// the broker (aborted when a successor with the same transactional id
// starts, or at TransactionTimeout). For a shutdown that must not wait
// for Kafka; Close afterwards does nothing.
func (s *Session) Abandon() {
	s.once.Do(func() {
		s.closed.Store(true)
		s.stopGroup()
		s.cancel()
		s.gts.Close()
	})
}

// closeJoinGrace is how long Close waits for a group join in flight:
// SessionConfig.CloseJoinGrace, by default one heartbeat interval (when the
// other members learn of the rebalance) and a second for their joins.
func (s *Session) closeJoinGrace() time.Duration {
	if s.cfg.CloseJoinGrace > 0 {
		return s.cfg.CloseJoinGrace
	}
	return heartbeatInterval(s.cfg.SessionTimeout) + time.Second
}

// heartbeatInterval is the group heartbeat interval for a session timeout.
func heartbeatInterval(sessionTimeout time.Duration) time.Duration {
	return min(3*time.Second, sessionTimeout/3)
}

func toMap(parts []Partition) map[string][]int32 {
	m := make(map[string][]int32)
	for _, p := range parts {
		m[p.Topic] = append(m[p.Topic], p.Partition)
	}
	return m
}

// noteHighWatermarks keeps the high watermark of every fetched partition
// (franz-go's FetchPartition.HighWatermark), for HighWatermark.
func (s *Session) noteHighWatermarks(fetches kgo.Fetches) {
	fetches.EachPartition(func(p kgo.FetchTopicPartition) {
		if p.Err != nil || p.HighWatermark < 0 {
			return
		}
		if s.hwm == nil {
			s.hwm = make(map[Partition][2]int64)
		}
		s.hwm[Partition{p.Topic, p.Partition}] = [2]int64{p.HighWatermark, p.LogStartOffset}
	})
}

// HighWatermark returns the high watermark (the offset after the last
// record) and the log start offset (-1: unknown) of topic/partition as of
// the last Poll that fetched it; ok is false before. Call it on the Poll
// goroutine.
func (s *Session) HighWatermark(topic string, partition int32) (hwm, logStart int64, ok bool) {
	h, ok := s.hwm[Partition{topic, partition}]
	return h[0], h[1], ok
}

// balancers are the group protocols the session joins with: kstate's
// balancer, then the one of the releases before it (cooperative-sticky, or
// range when co-partitioned) so that an older member still joins
// (balancer.Protocols). The first is wrapped to report each join to
// reconcile (revokes.go): franz-go builds every protocol's metadata at each
// join, so it sees every join whichever protocol the group runs.
func (s *Session) balancers() []kgo.GroupBalancer {
	bs := balancer.Protocols(s.newBalancer())
	if s.cfg.previousRelease {
		bs = []kgo.GroupBalancer{kgo.CooperativeStickyBalancer()}
		if s.cfg.CoPartitioned {
			bs[0] = kgo.RangeBalancer()
		}
	}
	bs[0] = trackedBalancer{bs[0], s}
	return bs
}
