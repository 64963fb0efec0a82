package integration

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Record metadata and headers in, headers, timestamps and a second output
// topic out, on the real broker, checked with kcat (librdkafka) as the
// foreign client.

// hrow is the input type of the metadata processor: the value and the
// record metadata ValueFromRecord copies in.
type hrow struct {
	V, Trace  string
	Topic     string
	Partition int32
	Offset    int64
	TsMs      int64
}

func hrowFromRecord(r processor.Record) (hrow, error) {
	row := hrow{V: string(r.Value), Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, TsMs: r.Timestamp.UnixMilli()}
	for _, h := range r.Headers {
		if h.Key == "trace" {
			row.Trace = string(h.Value)
		}
	}
	return row, nil
}

type auditRow struct {
	Key string `json:"key"`
	N   int64  `json:"n"`
	V   string `json:"v"`
}

// inTsBase and outTsBase are the timestamp bases of the input records
// (+ index) and of the main output's records (+ count): an hour and half an
// hour ago, whole seconds. Not fixed dates: a broker with time retention
// (7 days by default, counted from the records' own timestamps) deletes old
// records at its next retention check, in the middle of the test.
var (
	inTsBase  = time.Now().Add(-time.Hour).Truncate(time.Second).UnixMilli()
	outTsBase = inTsBase + (30 * time.Minute).Milliseconds()
)

// metaCounter counts rows per key and, per row, emits "<key>:<n>" to the
// output topic with headers (the input's trace, its topic/partition/offset
// and timestamp) and timestamp outTsBase+n, and an auditRow to the audit
// topic.
type metaCounter struct {
	audit   *processor.OutputTopic[auditRow]
	emitted *atomic.Bool // set once a row was emitted (nil: not tracked)
	count   state.ValueState[int64]
}

func (m *metaCounter) Init(h processor.Handle) (err error) {
	m.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (m *metaCounter) HandleInputRows(key string, rows iter.Seq[hrow], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := m.count.Get()
	if err != nil {
		return err
	}
	if m.emitted != nil {
		m.emitted.Store(true)
	}
	for r := range rows {
		n++
		err := processor.EmitWith(out, fmt.Sprintf("%s:%d", key, n), processor.OutputMeta{
			Timestamp: time.UnixMilli(outTsBase + n),
			Headers: []processor.Header{
				{Key: "trace", Value: []byte(r.Trace)},
				{Key: "src", Value: fmt.Appendf(nil, "%s/%d/%d", r.Topic, r.Partition, r.Offset)},
				{Key: "in-ts", Value: strconv.AppendInt(nil, r.TsMs, 10)},
			},
		})
		if err != nil {
			return err
		}
		if err := processor.EmitTo(out, m.audit, auditRow{Key: key, N: n, V: r.V}, processor.OutputMeta{
			Headers: []processor.Header{{Key: "kind", Value: []byte("audit")}},
		}); err != nil {
			return err
		}
	}
	return m.count.Update(n)
}

func (m *metaCounter) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (m *metaCounter) Close() error { return nil }

// kcatRecord is a record as `kcat -J` prints it.
type kcatRecord struct {
	Topic     string   `json:"topic"`
	Partition int32    `json:"partition"`
	Offset    int64    `json:"offset"`
	Ts        int64    `json:"ts"`
	Key       string   `json:"key"`
	Payload   string   `json:"payload"`
	Headers   []string `json:"headers"` // key, value, key, value, ...
}

func (r kcatRecord) header(k string) (string, bool) {
	for i := 0; i+1 < len(r.Headers); i += 2 {
		if r.Headers[i] == k {
			return r.Headers[i+1], true
		}
	}
	return "", false
}

// kcatRead reads topic to its end with kcat, read_committed unless
// uncommitted.
func kcatRead(t *testing.T, brokers []string, topic string, uncommitted bool) []kcatRecord {
	t.Helper()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (make deps installs it): %v", err)
	}
	iso := "read_committed"
	if uncommitted {
		iso = "read_uncommitted"
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-C", "-t", topic,
		"-o", "beginning", "-e", "-q", "-J", "-X", "isolation.level="+iso)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kcat -C -t %s: %v\n%s", topic, err, stderr.String())
	}
	var out []kcatRecord
	for _, l := range strings.Split(strings.TrimSpace(stdout.String()), "\n") {
		if l == "" {
			continue
		}
		var r kcatRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("kcat line %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

// An input header and the record's metadata reach HandleInputRows through
// ValueFromRecord; the emitted headers and timestamps arrive on the output
// records, and the rows emitted to the second output topic arrive there —
// all exactly once, checked with kcat. Before that, a batch whose
// transaction is aborted (its instance hangs after producing and a new
// instance with the same InstanceID fences it) leaves rows on both topics
// that read_uncommitted sees and read_committed does not.
func TestHeadersMetadataAndSecondTopic(t *testing.T) {
	t.Parallel()
	const keys, perKey = 4, 10
	e := newSpecEnv(t, 2)
	auditTopic := e.app + "-audit"
	newTopic(t, e.brokers, auditTopic, 3)

	// Input: key k<i%keys>, value v<i>, header trace=t<i>, timestamp
	// inTsBase+i.
	p, err := kafka.NewProducer(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	var recs []kafka.Record
	for i := range keys * perKey {
		recs = append(recs, kafka.Record{Topic: e.in, Partition: kafka.AnyPartition,
			Key: fmt.Appendf(nil, "k%d", i%keys), Value: fmt.Appendf(nil, "v%d", i),
			Timestamp: time.UnixMilli(inTsBase + int64(i)),
			Headers:   []kafka.Header{{Key: "trace", Value: fmt.Appendf(nil, "t%d", i)}}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	p.Close()

	audit := processor.NewOutputTopic(auditTopic, serde.JSON[auditRow]())
	var emitted atomic.Bool
	cfg := func() testApp[string, hrow, string] {
		return testApp[string, hrow, string]{kstate.Topology[string, hrow, string]{
			Inputs:   kstate.TopicsFromRecord(hrowFromRecord, e.in),
			KeySerde: serde.String(),
			NewProcessor: func() processor.StatefulProcessor[string, hrow, string] {
				return &metaCounter{audit: audit, emitted: &emitted}
			},
			Output: kstate.Output[string, string]{
				Topic:  e.out,
				Serde:  serde.String(),
				EmitTo: []processor.NamedTopic{audit},
			},
		}, kstate.Options{
			ApplicationID: e.app,
			InstanceID:    "i1",
			Kafka: kstate.KafkaOptions{
				Brokers: e.brokers,
			},
			State: kstate.StateOptions{
				Dir: t.TempDir(),
			},
			Batching: kstate.BatchingOptions{
				MaxRecords: 10,
				MaxWait:    100 * time.Millisecond,
			},
			Timeouts: kstate.TimeoutOptions{
				Shutdown: 10 * time.Second,
			},
			Observability: kstate.ObservabilityOptions{
				Logger: testlog.New(t),
			},
		}}
	}

	// A declared output topic that does not exist is a start-up error
	// naming it.
	bad := cfg()
	missing := processor.NewOutputTopic(e.app+"-missing", serde.String())
	bad.Output.EmitTo = []processor.NamedTopic{audit, missing}
	if err := newApp(t, bad).RunToEnd(ctx); err == nil || !strings.Contains(err.Error(), e.app+"-missing") {
		t.Fatalf("missing declared output topic: %v", err)
	}

	// The aborted batch: instance 1 hangs after the produce of its first
	// batch with rows (an earlier one may hold only changelog records).
	reached, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	hook := func(kp engine.KillPoint) {
		if kp == engine.AfterProduce && emitted.Load() {
			once.Do(func() {
				close(reached)
				<-release
			})
		}
	}
	first := newApp(t, cfg())
	firstDone := make(chan error, 1)
	go func() { firstDone <- first.Run(engine.WithKillHook(ctx, hook)) }()
	select {
	case <-reached:
	case err := <-firstDone:
		t.Fatalf("first instance stopped before its first produce: %v", err)
	case <-ctx.Done():
		t.Fatal("first instance never produced")
	}
	// The same InstanceID fences it (and aborts its open transaction),
	// then processes everything to the end.
	if err := newApp(t, cfg()).RunToEnd(ctx); err != nil {
		t.Fatalf("second instance: %v", err)
	}
	close(release)
	if err := <-firstDone; !errors.Is(err, kstate.ErrFenced) {
		t.Fatalf("first instance after it was fenced: %v, want ErrFenced", err)
	}

	n := keys * perKey
	outs, audits := kcatRead(t, e.brokers, e.out, false), kcatRead(t, e.brokers, auditTopic, false)
	allOuts, allAudits := kcatRead(t, e.brokers, e.out, true), kcatRead(t, e.brokers, auditTopic, true)
	t.Logf("read_committed: %d outputs, %d audit rows; read_uncommitted: %d and %d (the aborted batch's rows)", len(outs), len(audits), len(allOuts), len(allAudits))
	if len(outs) != n || len(audits) != n {
		t.Fatalf("read_committed: %d outputs and %d audit rows, want %d each", len(outs), len(audits), n)
	}
	if len(allOuts) <= n || len(allAudits) <= n {
		t.Fatalf("read_uncommitted: %d outputs and %d audit rows: the aborted batch wrote nothing to one of the topics (want more than %d each)", len(allOuts), len(allAudits), n)
	}

	// Main output: "<key>:<n>" once per n, timestamp outTsBase+n, the
	// input's trace header, source and timestamp.
	seen := map[string]bool{}
	for _, r := range outs {
		k, c, ok := strings.Cut(r.Payload, ":")
		cnt, err := strconv.ParseInt(c, 10, 64)
		if !ok || err != nil || k != r.Key {
			t.Fatalf("output %+v", r)
		}
		if seen[r.Payload] {
			t.Fatalf("output %s twice", r.Payload)
		}
		seen[r.Payload] = true
		if r.Ts != outTsBase+cnt {
			t.Fatalf("output %s: timestamp %d, want %d", r.Payload, r.Ts, outTsBase+cnt)
		}
		trace, ok1 := r.header("trace")
		src, ok2 := r.header("src")
		inTs, ok3 := r.header("in-ts")
		if !ok1 || !ok2 || !ok3 {
			t.Fatalf("output %s: headers %v", r.Payload, r.Headers)
		}
		i, err := strconv.Atoi(strings.TrimPrefix(trace, "t"))
		if err != nil || fmt.Sprintf("k%d", i%keys) != r.Key {
			t.Fatalf("output %s: trace header %q is not one of key %s's inputs", r.Payload, trace, r.Key)
		}
		if want := strconv.FormatInt(inTsBase+int64(i), 10); inTs != want {
			t.Fatalf("output %s: input timestamp %s, want %s", r.Payload, inTs, want)
		}
		if !strings.HasPrefix(src, e.in+"/") {
			t.Fatalf("output %s: source %q", r.Payload, src)
		}
	}
	if len(seen) != n {
		t.Fatalf("%d distinct outputs, want %d", len(seen), n)
	}
	// Audit topic: one JSON row per input row, header kind=audit, keyed by
	// the grouping key.
	seen = map[string]bool{}
	for _, r := range audits {
		var a auditRow
		if err := json.Unmarshal([]byte(r.Payload), &a); err != nil || a.Key != r.Key {
			t.Fatalf("audit row %+v: %v", r, err)
		}
		if kind, _ := r.header("kind"); kind != "audit" {
			t.Fatalf("audit row %s: headers %v", r.Payload, r.Headers)
		}
		id := fmt.Sprintf("%s:%d", a.Key, a.N)
		if seen[id] {
			t.Fatalf("audit row %s twice", id)
		}
		seen[id] = true
	}
	if len(seen) != n {
		t.Fatalf("%d distinct audit rows, want %d", len(seen), n)
	}
	t.Logf("kcat: %d outputs with headers and timestamps, %d audit rows, exactly once", len(outs), len(audits))
}

func newApp[K, I, O any](t *testing.T, cfg testApp[K, I, O]) *kstate.App[K, I, O] {
	t.Helper()
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	return app
}
