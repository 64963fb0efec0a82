package integration

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Error policies on the real broker: poison values, nil keys and failing
// keys under each policy, with exact read_committed outputs, dead-letter
// records and state afterwards.

// faulty counts rows per key and emits the new count for every row; a row
// "fail", "panic", "unser" or "huge" first counts and emits like any other
// (so a discarded call has something to discard), then returns an error,
// panics, emits an output the serde refuses, or emits one too large.
type faulty struct{ count state.ValueState[int64] }

func newFaulty() processor.StatefulProcessor[string, string, string] { return &faulty{} }

func (f *faulty) Init(h processor.Handle) (err error) {
	f.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (f *faulty) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := f.count.Get()
	if err != nil {
		return err
	}
	for v := range rows {
		n++
		if err := f.count.Update(n); err != nil {
			return err
		}
		if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
			return err
		}
		switch v {
		case "fail":
			return fmt.Errorf("refusing key %s", key)
		case "panic":
			panic("exploded on " + key)
		case "unser":
			if err := out.Emit("unserializable"); err != nil {
				return err
			}
		case "huge":
			if err := out.Emit(strings.Repeat("x", 2<<20)); err != nil {
				return err
			}
		}
	}
	return nil
}

func (f *faulty) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (f *faulty) Close() error { return nil }

type poisonSerde struct{}

func (poisonSerde) Deserialize(b []byte) (string, error) {
	if string(b) == "poison" {
		return "", errors.New("poison value")
	}
	return string(b), nil
}

var refusingSerde = serde.SerializerFunc[string](func(s string) ([]byte, error) {
	if s == "unserializable" {
		return nil, errors.New("cannot encode")
	}
	return []byte(s), nil
})

func (e specEnv) faultyConfig(t *testing.T) testApp[string, string, string] {
	cfg := e.config(t, newFaulty)
	cfg.Inputs[0].ValueSerde = poisonSerde{}
	cfg.Output.Serde = refusingSerde
	return cfg
}

// produceRaw writes records with explicit partitions (nil keys allowed).
func produceRaw(t *testing.T, brokers []string, recs ...kafka.Record) {
	t.Helper()
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

// waitRecords waits until topic holds at least n records (read_committed).
func waitRecords(t *testing.T, brokers []string, topic string, n int) []kafka.Record {
	t.Helper()
	deadline := time.Now().Add(waitOut)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs, err := kafka.ReadAll(ctx, brokers, topic)
		cancel()
		if err == nil && len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: waited %v for %d records, have %d (err %v)", topic, waitOut, n, len(recs), err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func headers(r kafka.Record) map[string]string {
	h := map[string]string{}
	for _, x := range r.Headers {
		h[x.Key] = string(x.Value)
	}
	return h
}

// checkDeadLetter checks the kstate headers of a dead-letter record read
// from partition p of the dead-letter topic.
func checkDeadLetter(t *testing.T, e specEnv, r kafka.Record, stage, errPart string) {
	t.Helper()
	h := headers(r)
	if h[kstate.HeaderStage] != stage || h[kstate.HeaderApplication] != e.app || h[kstate.HeaderSourceTopic] != e.in ||
		h[kstate.HeaderSourcePartition] != strconv.Itoa(int(r.Partition)) || !strings.Contains(h[kstate.HeaderError], errPart) {
		t.Errorf("dead letter %s=%s: headers %v, want stage %s, source %s/%d, error containing %q", r.Key, r.Value, h, stage, e.in, r.Partition, errPart)
	}
	if _, err := strconv.ParseInt(h[kstate.HeaderSourceOffset], 10, 64); err != nil {
		t.Errorf("dead letter %s=%s: offset header %q", r.Key, r.Value, h[kstate.HeaderSourceOffset])
	}
	if ms, err := strconv.ParseInt(h[kstate.HeaderTime], 10, 64); err != nil || time.Since(time.UnixMilli(ms)).Abs() > 5*time.Minute {
		t.Errorf("dead letter %s=%s: time header %q", r.Key, r.Value, h[kstate.HeaderTime])
	}
}

// The decode input: on one partition the poison record comes first, then a
// good row of the same key; a nil-key record on partition 0; good rows.
func produceDecodeInput(t *testing.T, e specEnv) {
	testprocs.Produce(t, e.brokers, e.in, "k=poison", "k=x", "j=x")
	produceRaw(t, e.brokers,
		kafka.Record{Topic: e.in, Partition: 0, Key: nil, Value: []byte("nokey")},
		kafka.Record{Topic: e.in, Partition: 0, Key: []byte("j"), Value: []byte("y")})
}

func TestFaultPolicyDecodeFail(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	app := newSpecApp(t, e.faultyConfig(t))
	_, done := testprocs.StartWatch(t, app)
	produceDecodeInput(t, e)
	var err error
	select {
	case err = <-done:
	case <-time.After(waitOut):
		t.Fatal("Run did not stop on the poison record")
	}
	var de *kstate.DecodeError
	if !errors.As(err, &de) {
		t.Fatalf("Run = %v, want a DecodeError", err)
	}
	if !(de.Part == "value" && strings.Contains(de.Err.Error(), "poison")) && !errors.Is(err, kstate.ErrNilKey) {
		t.Fatalf("Run = %v: not the poison record nor the nil key", err)
	}
	// Nothing of k (its poison record is first on its partition) was
	// committed.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, rerr := testprocs.Read(ctx, e.brokers, e.out)
	if rerr != nil {
		t.Fatal(rerr)
	}
	if len(out["k"]) != 0 {
		t.Fatalf("outputs %v: k was committed after its poison record", out)
	}
}

func TestFaultPolicyDecodeSkip(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.faultyConfig(t)
	cfg.OnDecodeError = kstate.DecodeErrorSkip
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	produceDecodeInput(t, e)
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "j=[1 2] k=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := app.Metrics().Total; m.Skipped != 2 || m.DecodeErrors != 2 || m.DeadLettered != 0 {
		t.Fatalf("counters %+v, want 2 skipped", m)
	}
	// Nothing waits behind the skipped records, and no dead-letter topic
	// was created.
	testprocs.Produce(t, e.brokers, e.in, "k=x")
	app = newSpecApp(t, cfg)
	stop = testprocs.Start(t, app)
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 4, waitOut), "j=[1 2] k=[1 2]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	adm, err := kafka.NewAdmin(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if _, err := adm.Partitions(context.Background(), app.DeadLetterTopic()); !errors.Is(err, kafka.ErrTopicNotFound) {
		t.Fatalf("dead-letter topic under Skip: %v, want not found", err)
	}
}

func TestFaultPolicyDecodeDeadLetter(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.faultyConfig(t)
	cfg.OnDecodeError = kstate.DecodeErrorDeadLetter
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	produceDecodeInput(t, e)
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "j=[1 2] k=[1]")
	dlq := waitRecords(t, e.brokers, app.DeadLetterTopic(), 2)
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if len(dlq) != 2 {
		t.Fatalf("%d dead letters, want 2", len(dlq))
	}
	slices.SortFunc(dlq, func(a, b kafka.Record) int { return strings.Compare(string(a.Value), string(b.Value)) })
	if r := dlq[0]; r.Key != nil || string(r.Value) != "nokey" || r.Partition != 0 {
		t.Errorf("nil-key dead letter: key %q value %q partition %d", r.Key, r.Value, r.Partition)
	}
	checkDeadLetter(t, e, dlq[0], "decode", "nil key")
	if r := dlq[1]; string(r.Key) != "k" || string(r.Value) != "poison" {
		t.Errorf("poison dead letter: %s=%s", r.Key, r.Value)
	}
	checkDeadLetter(t, e, dlq[1], "decode", "poison value")
	if h := headers(dlq[1]); h[kstate.HeaderSourceOffset] != "0" {
		t.Errorf("poison offset header %q, want 0", h[kstate.HeaderSourceOffset])
	}
	adm, err := kafka.NewAdmin(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if n, err := adm.Partitions(context.Background(), app.DeadLetterTopic()); err != nil || n != 2 {
		t.Fatalf("dead-letter topic has %d partitions (%v), want the input's 2", n, err)
	}
	if m := app.Metrics().Total; m.DeadLettered != 2 || m.DecodeErrors != 2 {
		t.Fatalf("counters %+v", m)
	}
}

// TestFaultPolicyProcessingDeadLetter: an error, a panic, an unserializable
// output and a too large output, each on its own key, under
// ProcessingErrorDeadLetter: the keys' rows are dead-lettered with headers,
// their state and outputs discarded (their next row counts 1), every other
// key exact.
func TestFaultPolicyProcessingDeadLetter(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 3)
	cfg := e.faultyConfig(t)
	cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
	app := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "f=fail", "p=panic", "u=unser", "h=huge", "a=x", "b=x")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1 2] b=[1]")
	dlq := waitRecords(t, e.brokers, app.DeadLetterTopic(), 4)
	if len(dlq) != 4 {
		t.Fatalf("%d dead letters, want 4", len(dlq))
	}
	want := map[string]string{"f": "refusing key f", "p": "panicked: exploded on p", "u": "encode output", "h": "too large"}
	for _, r := range dlq {
		w, ok := want[string(r.Key)]
		if !ok {
			t.Errorf("unexpected dead letter %s=%s", r.Key, r.Value)
			continue
		}
		delete(want, string(r.Key))
		checkDeadLetter(t, e, r, "process", w)
	}
	// The failed calls' state changes were discarded: the next row of each
	// key counts 1.
	testprocs.Produce(t, e.brokers, e.in, "f=x", "p=x", "u=x", "h=x", "a=x")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 8, waitOut), "a=[1 2 3] b=[1] f=[1] h=[1] p=[1] u=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := app.Metrics().Total; m.DeadLettered != 4 || m.ProcessingErrors != 4 {
		t.Fatalf("counters %+v", m)
	}
}
