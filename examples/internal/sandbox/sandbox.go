// Package sandbox is the scaffolding the examples share and a real
// application does not need: it provides the Kafka cluster (an embedded
// in-process one unless brokers are given), creates an example's topics,
// writes its scripted input, reads its output back and drives a scripted
// clock, and the kstate.Options of a sandbox run (Env.Options). The
// processors and their kstate.Topology live in the examples themselves, so
// that each example reads as a real application would.
package sandbox

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/serde"
)

// WaitTimeout bounds every wait of Await and Until: a story that does not
// see what it expects within it fails with a message saying what was missing
// instead of hanging.
const WaitTimeout = 30 * time.Second

// Env is the Kafka cluster and state directory an example runs on.
type Env struct {
	// Brokers are the bootstrap addresses: the --brokers flag, or the
	// embedded cluster's.
	Brokers []string
	// StateDir is the --state-dir flag, or a temporary directory removed by
	// Close.
	StateDir string
	// Embedded is true when the cluster is the in-process one.
	Embedded bool

	emb    *embedded.Cluster
	admin  *kafka.Admin
	prod   *kafka.Producer
	tmp    string
	suffix string
}

// Open connects to brokers, or starts an embedded in-process Kafka when
// brokers is empty. An empty stateDir means a new temporary directory.
func Open(brokers []string, stateDir string) (_ *Env, err error) {
	e := &Env{Brokers: brokers, StateDir: stateDir}
	defer func() {
		if err != nil {
			e.Close()
		}
	}()
	var b [3]byte
	_, _ = rand.Read(b[:])
	e.suffix = hex.EncodeToString(b[:])
	if len(brokers) == 0 {
		if e.emb, err = embedded.Start(embedded.Options{}); err != nil {
			return nil, fmt.Errorf("sandbox: start embedded Kafka: %w", err)
		}
		e.Brokers, e.Embedded = e.emb.Brokers(), true
	}
	if e.StateDir == "" {
		if e.tmp, err = os.MkdirTemp("", "kstate-example-"); err != nil {
			return nil, fmt.Errorf("sandbox: %w", err)
		}
		e.StateDir = e.tmp
	}
	if e.admin, err = kafka.NewAdmin(e.Brokers); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	if e.prod, err = kafka.NewProducer(e.Brokers); err != nil {
		return nil, fmt.Errorf("sandbox: %w", err)
	}
	return e, nil
}

// Close releases the clients, stops the embedded cluster and removes the
// temporary state directory. It is idempotent.
func (e *Env) Close() {
	if e.prod != nil {
		e.prod.Close()
		e.prod = nil
	}
	if e.admin != nil {
		e.admin.Close()
		e.admin = nil
	}
	if e.emb != nil {
		e.emb.Close()
		e.emb = nil
	}
	if e.tmp != "" {
		os.RemoveAll(e.tmp)
		e.tmp = ""
	}
}

// Logger is the Options.Observability.Logger of the examples: the engine's log goes to
// stderr when the environment variable KSTATE_EXAMPLES_LOG is set, and
// nowhere otherwise, so that the story stays readable.
func (e *Env) Logger() *slog.Logger {
	if os.Getenv("KSTATE_EXAMPLES_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	return slog.New(slog.DiscardHandler)
}

// Name returns name with a suffix unique to this run, for application ids
// and topics: a second run against the same cluster starts from scratch
// instead of continuing the first run's state.
func (e *Env) Name(name string) string { return name + "-" + e.suffix }

// Options returns the kstate.Options an example runs under in the sandbox:
// application id Name(app), the sandbox's cluster, state directory and
// logger, and short polls (MaxWait 50ms) so that the scripted steps move
// quickly. A real application sets these from its own configuration.
func (e *Env) Options(app string) kstate.Options {
	return kstate.Options{
		ApplicationID: e.Name(app),
		Kafka:         kstate.KafkaOptions{Brokers: e.Brokers},
		State:         kstate.StateOptions{Dir: e.StateDir},
		Batching:      kstate.BatchingOptions{MaxWait: 50 * time.Millisecond},
		Observability: kstate.ObservabilityOptions{Logger: e.Logger()},
	}
}

// CreateTopics creates topics with the given partition count (the broker's
// default replication factor).
func (e *Env) CreateTopics(ctx context.Context, partitions int, topics ...string) error {
	for _, t := range topics {
		if err := e.admin.EnsureTopic(ctx, kafka.TopicSpec{Name: t, Partitions: partitions, ReplicationFactor: -1}); err != nil {
			return fmt.Errorf("sandbox: create topic %q: %w", t, err)
		}
	}
	return nil
}

// Row is a decoded record.
type Row[K, V any] struct {
	Key   K
	Value V
	// Time is the record timestamp; zero when producing means the
	// producer's clock.
	Time time.Time
	// Partition and Offset locate a record read; ignored when producing.
	Partition int32
	Offset    int64
}

// KV is a Row without a timestamp.
func KV[K, V any](k K, v V) Row[K, V] { return Row[K, V]{Key: k, Value: v} }

// Produce writes rows to topic, partitioned by key like every standard
// Kafka producer, and returns once the broker has them.
func Produce[K, V any](ctx context.Context, e *Env, topic string, kc serde.Serde[K], vc serde.Serde[V], rows ...Row[K, V]) error {
	recs := make([]kafka.Record, len(rows))
	for i, r := range rows {
		k, err := kc.Serialize(r.Key)
		if err != nil {
			return fmt.Errorf("sandbox: encode key %v: %w", r.Key, err)
		}
		v, err := vc.Serialize(r.Value)
		if err != nil {
			return fmt.Errorf("sandbox: encode value %v: %w", r.Value, err)
		}
		recs[i] = kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: k, Value: v, Timestamp: r.Time}
	}
	if err := e.prod.Produce(ctx, recs...); err != nil {
		return fmt.Errorf("sandbox: %w", err)
	}
	return nil
}

// Read returns the committed records of topic (read_committed), decoded,
// ordered by partition and then offset.
func Read[K, V any](ctx context.Context, e *Env, topic string, kc serde.Serde[K], vc serde.Serde[V]) ([]Row[K, V], error) {
	recs, err := kafka.ReadAll(ctx, e.Brokers, topic)
	if err != nil {
		return nil, fmt.Errorf("sandbox: read %q: %w", topic, err)
	}
	rows := make([]Row[K, V], len(recs))
	for i, r := range recs {
		if rows[i].Key, err = kc.Deserialize(r.Key); err != nil {
			return nil, fmt.Errorf("sandbox: topic %q partition %d offset %d: key: %w", topic, r.Partition, r.Offset, err)
		}
		if rows[i].Value, err = vc.Deserialize(r.Value); err != nil {
			return nil, fmt.Errorf("sandbox: topic %q partition %d offset %d: value: %w", topic, r.Partition, r.Offset, err)
		}
		rows[i].Time, rows[i].Partition, rows[i].Offset = r.Timestamp, r.Partition, r.Offset
	}
	return rows, nil
}

// Await waits until topic holds at least n committed records and returns
// them (see Read). The application writes asynchronously, so this polls.
func Await[K, V any](ctx context.Context, e *Env, topic string, kc serde.Serde[K], vc serde.Serde[V], n int) ([]Row[K, V], error) {
	var rows []Row[K, V]
	var lastErr error
	err := Until(ctx, fmt.Sprintf("%d records on topic %q", n, topic), func() bool {
		rows, lastErr = Read(ctx, e, topic, kc, vc)
		return lastErr == nil && len(rows) >= n
	})
	if err != nil {
		if lastErr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", err, lastErr)
		}
		return nil, fmt.Errorf("%w (have %d: %v)", err, len(rows), rows)
	}
	return rows, nil
}

// AwaitFunc polls topic (see Read) until done says its records are
// complete, and returns them; what names the wait in a timeout's error. A
// read error, or one done returns, ends the wait with that error.
func AwaitFunc[K, V any](ctx context.Context, e *Env, topic string, kc serde.Serde[K], vc serde.Serde[V], what string,
	done func([]Row[K, V]) (bool, error)) ([]Row[K, V], error) {
	var rows []Row[K, V]
	var lastErr error
	err := Until(ctx, what, func() bool {
		if rows, lastErr = Read(ctx, e, topic, kc, vc); lastErr != nil {
			return true
		}
		var ok bool
		ok, lastErr = done(rows)
		return ok || lastErr != nil
	})
	if err == nil {
		err = lastErr
	}
	if err != nil {
		return nil, err
	}
	return rows, nil
}

// AwaitCounts waits until the counts on topic (string keys, int64 counts,
// a key's latest record being its count) add up to at least total, and
// returns them, key to latest count. A key without a record in base
// started at 0; one in base started at its count there (an initial state),
// and only what it grew by adds up. The result holds the keys with a
// record on topic only. A count output is final once it accounts for every
// row produced; waiting for the processor's metrics instead is not enough,
// since a batch's records become visible to a read_committed reader
// shortly after its transaction commits.
func AwaitCounts(ctx context.Context, e *Env, topic string, base map[string]int64, total int64) (map[string]int64, error) {
	latest := map[string]int64{}
	_, err := AwaitFunc(ctx, e, topic, serde.String(), serde.Int64(), fmt.Sprintf("counts adding up to %d on topic %q", total, topic),
		func(rows []Row[string, int64]) (bool, error) {
			clear(latest)
			sum := int64(0)
			for _, r := range rows {
				prev, ok := latest[r.Key]
				if !ok {
					prev = base[r.Key]
				}
				sum += r.Value - prev
				latest[r.Key] = r.Value
			}
			return sum >= total, nil
		})
	if err != nil {
		return nil, err
	}
	return latest, nil
}

// Tail returns the records of a topic that it has not returned before.
type Tail[K, V any] struct {
	e     *Env
	topic string
	kc    serde.Serde[K]
	vc    serde.Serde[V]
	seen  map[int32]int64 // partition → next offset not returned yet
	total int
}

// NewTail returns a Tail at the beginning of topic.
func NewTail[K, V any](e *Env, topic string, kc serde.Serde[K], vc serde.Serde[V]) *Tail[K, V] {
	return &Tail[K, V]{e: e, topic: topic, kc: kc, vc: vc, seen: map[int32]int64{}}
}

// Next waits until the topic holds at least n records not returned yet,
// and returns all of them (ordered by partition, then offset). Next(ctx, 0)
// returns what is new without waiting.
func (t *Tail[K, V]) Next(ctx context.Context, n int) ([]Row[K, V], error) {
	var fresh []Row[K, V]
	var lastErr error
	err := Until(ctx, fmt.Sprintf("%d more records on topic %q (after %d)", n, t.topic, t.total), func() bool {
		var rows []Row[K, V]
		rows, lastErr = Read(ctx, t.e, t.topic, t.kc, t.vc)
		fresh = fresh[:0]
		for _, r := range rows {
			if r.Offset >= t.seen[r.Partition] {
				fresh = append(fresh, r)
			}
		}
		return lastErr == nil && len(fresh) >= n
	})
	if err != nil {
		if lastErr != nil {
			return nil, fmt.Errorf("%w (last error: %v)", err, lastErr)
		}
		return nil, fmt.Errorf("%w (have %d: %v)", err, len(fresh), fresh)
	}
	for _, r := range fresh {
		t.seen[r.Partition] = r.Offset + 1
	}
	t.total += len(fresh)
	return fresh, nil
}

// Until polls cond until it holds, for at most WaitTimeout; what says what
// was awaited in the error.
func Until(ctx context.Context, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, WaitTimeout)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if cause := context.Cause(ctx); !errors.Is(cause, context.DeadlineExceeded) {
				return fmt.Errorf("sandbox: waiting for %s: %w", what, cause)
			}
			return fmt.Errorf("sandbox: waited %v for %s", WaitTimeout, what)
		case <-tick.C:
		}
	}
	return nil
}

// Runner is what Start runs: a *kstate.App.
type Runner interface {
	Run(ctx context.Context) error
}

// ErrStopped is the cause of Start's context when Run returned nil.
var ErrStopped = errors.New("sandbox: the application stopped")

// Start runs app.Run on a new goroutine. The returned context is cancelled
// when Run returns, with Run's error (or ErrStopped) as its cause: waits
// that use it end at once if the application fails instead of timing out.
// stop cancels Run, waits for it and returns its error; it may be called
// more than once.
func Start(ctx context.Context, app Runner) (running context.Context, stop func() error) {
	runCtx, cancelRun := context.WithCancel(ctx)
	running, cancelRunning := context.WithCancelCause(ctx)
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = app.Run(runCtx)
		if runErr != nil {
			cancelRunning(fmt.Errorf("the application stopped: %w", runErr))
		} else {
			cancelRunning(ErrStopped)
		}
	}()
	stop = func() error {
		cancelRun()
		<-done
		return runErr
	}
	return running, stop
}

// Clock is a scripted clock for Options.Observability.Clock: it moves only when the story
// says so, which makes processing-time timers and TTL deterministic (a
// real application leaves Options.Observability.Clock nil, i.e. time.Now).
type Clock struct{ ms atomic.Int64 }

// NewClock returns a clock showing t.
func NewClock(t time.Time) *Clock {
	c := &Clock{}
	c.ms.Store(t.UnixMilli())
	return c
}

// Now is the Options.Observability.Clock function.
func (c *Clock) Now() time.Time { return time.UnixMilli(c.ms.Load()).UTC() }

// Set moves the clock to t.
func (c *Clock) Set(t time.Time) { c.ms.Store(t.UnixMilli()) }

// SplitBrokers turns the --brokers flag into a list; "" gives nil (the
// embedded Kafka).
func SplitBrokers(flag string) []string {
	if flag == "" {
		return nil
	}
	return strings.Split(flag, ",")
}
