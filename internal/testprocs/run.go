package testprocs

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
)

// Runner is the part of *kstate.App the helpers need.
type Runner interface {
	Run(ctx context.Context) error
}

// Start runs app on a goroutine; stop cancels it and returns Run's error.
// If the test ends first, the app is stopped by t.Cleanup.
func Start(t testing.TB, app Runner) (stop func() error) {
	stop, _ = StartWatch(t, app)
	return stop
}

// StartWatch is Start, plus a channel that receives Run's error when the
// app stops (by itself or by stop).
func StartWatch(t testing.TB, app Runner) (stop func() error, done <-chan error) {
	ctx, cancel := context.WithCancel(context.Background())
	ch := make(chan error, 1)
	out := make(chan error, 1)
	go func() { err := app.Run(ctx); ch <- err; out <- err }()
	var stopped bool
	var err error
	stop = func() error {
		if !stopped {
			stopped = true
			cancel()
			err = <-ch
		}
		return err
	}
	t.Cleanup(func() { stop() })
	return stop, out
}

// Produce writes key/value string pairs ("key=value") to topic, keyed so
// that Kafka's default partitioner places them.
func Produce(t testing.TB, brokers []string, topic string, kvs ...string) {
	t.Helper()
	p, err := kafka.NewProducer(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs := make([]kafka.Record, len(kvs))
	for i, kv := range kvs {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			t.Fatalf("Produce: %q is not key=value", kv)
		}
		recs[i] = kafka.Record{Topic: topic, Partition: kafka.AnyPartition, Key: []byte(k), Value: []byte(v)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatalf("produce to %s: %v", topic, err)
	}
}

// Outputs is a topic's records as "key=value" per key, in offset order
// (records of one key are in one partition).
type Outputs map[string][]string

// Count is the number of records.
func (o Outputs) Count() int {
	n := 0
	for _, v := range o {
		n += len(v)
	}
	return n
}

// String lists keys in order, e.g. "a=[1 2 3] b=[1 2]".
func (o Outputs) String() string {
	keys := make([]string, 0, len(o))
	for k := range o {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var b strings.Builder
	for i, k := range keys {
		if i > 0 {
			b.WriteByte(' ')
		}
		fmt.Fprintf(&b, "%s=%v", k, o[k])
	}
	return b.String()
}

// Read reads topic (read_committed) into Outputs.
func Read(ctx context.Context, brokers []string, topic string) (Outputs, error) {
	recs, err := kafka.ReadAll(ctx, brokers, topic)
	if err != nil {
		return nil, err
	}
	o := Outputs{}
	for _, r := range recs {
		o[string(r.Key)] = append(o[string(r.Key)], string(r.Value))
	}
	return o, nil
}

// WaitOutputs waits until topic holds at least n records (read_committed)
// and returns them; it fails the test after timeout. It waits for Kafka,
// not for time logic: the application under test commits asynchronously.
func WaitOutputs(t testing.TB, brokers []string, topic string, n int, timeout time.Duration) Outputs {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var last Outputs
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		o, err := Read(ctx, brokers, topic)
		cancel()
		if err == nil {
			last = o
			if o.Count() >= n {
				return o
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: waited %v for %d records, have %d: %v (last error %v)", topic, timeout, n, last.Count(), last, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Eventually polls cond until it is true or fails the test after timeout.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("waited %v for %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// KeyCycler produces "k<i mod Keys>=v" records to one topic and counts
// them, so a test knows how many outputs to wait for and how many rows
// each key got.
type KeyCycler struct {
	T       testing.TB
	Brokers []string
	Topic   string
	Keys    int
	Sent    int
}

// Produce writes n more records, continuing the key cycle.
func (c *KeyCycler) Produce(n int) {
	c.T.Helper()
	kvs := make([]string, 0, n)
	for range n {
		kvs = append(kvs, fmt.Sprintf("k%d=v", c.Sent%c.Keys))
		c.Sent++
	}
	Produce(c.T, c.Brokers, c.Topic, kvs...)
}

// Step produces n records, then waits d; it returns an error if done (Run's
// result) delivers meanwhile: a step of a fault case's input loop.
func (c *KeyCycler) Step(n int, d time.Duration, done <-chan error) error {
	c.Produce(n)
	select {
	case err := <-done:
		return fmt.Errorf("run stopped: %v", err)
	case <-time.After(d):
		return nil
	}
}
