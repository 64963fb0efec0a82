package processor_test

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// WordCount counts rows per key in a ValueState and emits "<key>=<count>"
// once per key and micro-batch.
type WordCount struct {
	count state.ValueState[int64]
}

func (w *WordCount) Init(h processor.Handle) (err error) {
	w.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (w *WordCount) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := w.count.Get() // absent reads as (0, false)
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := w.count.Update(n); err != nil {
		return err
	}
	return out.Emit(fmt.Sprintf("%s=%d", key, n))
}

func (w *WordCount) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (w *WordCount) Close() error { return nil }

// A processor runs as a kstate application: here on an embedded in-process
// Kafka, with input a a a b b.
func Example() {
	emb, err := embedded.Start(embedded.Options{Topics: map[string]int{"words": 2, "counts": 2}})
	if err != nil {
		panic(err)
	}
	defer emb.Close()
	dir, err := os.MkdirTemp("", "kstate-example-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(dir)

	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &WordCount{} },
		Output: kstate.Output[string, string]{
			Topic: "counts",
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: "wordcount",
		Kafka: kstate.KafkaOptions{
			Brokers: emb.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: slog.New(slog.DiscardHandler), // quiet
		},
	})
	if err != nil {
		panic(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()

	producer, err := kafka.NewProducer(emb.Brokers())
	if err != nil {
		panic(err)
	}
	defer producer.Close()
	var words []kafka.Record
	for _, w := range []string{"a", "a", "a", "b", "b"} {
		words = append(words, kafka.Record{Topic: "words", Partition: kafka.AnyPartition, Key: []byte(w), Value: []byte(w)})
	}
	if err := producer.Produce(ctx, words...); err != nil {
		panic(err)
	}
	// Wait until the five rows are processed and committed.
	for deadline := time.Now().Add(time.Minute); app.Metrics().Total.RowsIn < 5; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			panic("the rows were not processed")
		}
	}
	stop()
	if err := <-done; err != nil {
		panic(err)
	}

	counts, err := kafka.ReadAll(context.Background(), emb.Brokers(), "counts")
	if err != nil {
		panic(err)
	}
	latest := map[string]string{} // a key's records are in order in its partition
	for _, r := range counts {
		latest[string(r.Key)] = string(r.Value)
	}
	fmt.Println(latest["a"], latest["b"])
	// Output: a=3 b=2
}

// A processor is tested without Kafka with package kstatetest, which runs it
// on the real engine over in-memory state: here the application's Topology,
// two micro-batches and the committed state. (In a test, pass the test's
// *testing.T.)
func Example_test() {
	d := kstatetest.New(&testing.T{}, kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &WordCount{} },
		Output:       kstate.Output[string, string]{Topic: "counts", Serde: serde.String()},
	})
	defer d.Close()
	for _, w := range []string{"a", "a", "a", "b"} {
		d.Input(w, w)
	}
	d.MustRunBatch()
	d.Input("a", "a")
	d.MustRunBatch()
	fmt.Println(d.OutputValues())
	n, ok := kstatetest.ValueOf(d, "a", "count", state.Int64())
	fmt.Println(n, ok)
	// Output:
	// [a=3 b=1 a=4]
	// 4 true
}
