// Command simplecounter is the spec's counter example: it counts the
// records of each key in a ValueState and emits the running count. Input
// a a a b b gives a=3 b=2; more input continues from the stored counts.
//
//	go run ./examples/simplecounter                           # embedded Kafka
//	go run ./examples/simplecounter --brokers localhost:9092  # your cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Counter counts the rows of each key. Rows are words; the key is the word.
type Counter struct {
	// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
	processor.Defaults[string, int64]

	count state.ValueState[int64]
}

func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

// HandleInputRows gets all rows of one key in a micro-batch and emits the
// key's new count once.
func (c *Counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
	n, _, err := c.count.Get() // absent: n == 0
	if err != nil {
		return err
	}
	for range rows {
		n++
	}
	if err := c.count.Update(n); err != nil {
		return err
	}
	return out.Emit(n)
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "simplecounter:", err)
		os.Exit(1)
	}
}

// run counts two rounds of words and prints the latest count of every key
// after each.
func run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	words, counts := env.Name("words"), env.Name("counts")
	if err := env.CreateTopics(ctx, 3, words, counts); err != nil {
		return err
	}
	app, err := kstate.New(kstate.Topology[string, string, int64]{
		Inputs:       kstate.Topics(serde.String(), words),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		Output: kstate.Output[string, int64]{
			Topic: counts, // record key: the word; value: its count
			Serde: serde.Int64(),
		},
	}, env.Options("simplecounter"))
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	var latest map[string]int64
	produced := int64(0)
	for _, round := range [][]string{{"a", "a", "a", "b", "b"}, {"a", "c"}} {
		rows := make([]sandbox.Row[string, string], len(round))
		for i, w := range round {
			rows[i] = sandbox.KV(w, w)
		}
		if err := sandbox.Produce(running, env, words, serde.String(), serde.String(), rows...); err != nil {
			return err
		}
		produced += int64(len(rows))
		// Counted once the counts on the output topic add up to every row produced.
		var err error
		if latest, err = sandbox.AwaitCounts(running, env, counts, nil, produced); err != nil {
			return err
		}
		fmt.Fprintf(out, "in   %s\nout  %s\n", strings.Join(round, " "), format(latest))
	}
	return nil
}

// format prints counts as "a=3 b=2", sorted by key.
func format(counts map[string]int64) string {
	var kv []string
	for k, n := range counts {
		kv = append(kv, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
