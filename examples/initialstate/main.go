// Command initialstate shows initial state: a counter whose starting counts
// come from a CSV file (any Go iterator works, or a Kafka topic), applied
// through HandleInitialState exactly once, on the application's first run.
// Initial x=10, input x x gives x=12; after a restart the initial state is
// not applied again.
//
//	go run ./examples/initialstate                           # embedded Kafka
//	go run ./examples/initialstate --brokers localhost:9092  # your cluster
package main

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Counter counts the rows of each key, starting from the initial count.
type Counter struct {
	// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
	processor.Defaults[string, int64]

	count state.ValueState[int64]
}

func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

// HandleInitialState makes Counter a processor.InitialStateHandler[string,
// int64]: it is called once per initial row, before any input of the key's
// partition, on the first run only. It may not emit.
func (c *Counter) HandleInitialState(_ string, start int64, _ processor.TimerValues) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	return c.count.Update(n + start) // several rows of one key add up
}

func (c *Counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
	n, _, err := c.count.Get()
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

// initialCSV stands for a file with the counts to start from.
const initialCSV = "x,10\ny,100\n"

// readCSV yields the (key, count) rows of a CSV text (a file in real
// life: open it inside the iterator, which runs once per Run). A bad line
// stops it with the error in *errp, checked after the run.
func readCSV(text string, errp *error) iter.Seq2[string, int64] {
	return func(yield func(string, int64) bool) {
		sc := bufio.NewScanner(strings.NewReader(text))
		for line := 1; sc.Scan(); line++ {
			key, n, ok := strings.Cut(sc.Text(), ",")
			count, err := strconv.ParseInt(n, 10, 64)
			if !ok || err != nil {
				*errp = fmt.Errorf("initial state line %d: %q is not key,count", line, sc.Text())
				return
			}
			if !yield(key, count) {
				return
			}
		}
	}
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "initialstate:", err)
		os.Exit(1)
	}
}

// run starts the counter with the initial state, feeds it x x, restarts
// it, and feeds it x y.
func run(ctx context.Context, brokers []string, stateDir string, out io.Writer) error {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	words, counts := env.Name("words"), env.Name("counts")
	if err := env.CreateTopics(ctx, 2, words, counts); err != nil {
		return err
	}
	var csvErr error
	cfg := kstate.Topology[string, string, int64]{
		Inputs:       kstate.Topics(serde.String(), words),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &Counter{} },
		InitialState: kstate.InitialStateFromSeq(readCSV(initialCSV, &csvErr)),
		Output: kstate.Output[string, int64]{
			Topic: counts,
			Serde: serde.Int64(),
		},
	}
	opts := env.Options("initialstate")
	fmt.Fprintf(out, "initial  %s\n", strings.ReplaceAll(strings.TrimSpace(initialCSV), "\n", " "))

	// The counts start from the initial state: the output adds up to the
	// rows produced on top of it.
	base := map[string]int64{}
	for k, n := range readCSV(initialCSV, &csvErr) {
		base[k] += n
	}
	var latest map[string]int64
	produced := int64(0)
	for i, round := range [][]string{{"x", "x"}, {"x", "y"}} {
		if i > 0 {
			fmt.Fprintln(out, "restart  (same application id: not its first run any more)")
		}
		app, err := kstate.New(cfg, opts)
		if err != nil {
			return err
		}
		rows := make([]sandbox.Row[string, string], len(round))
		for i, w := range round {
			rows[i] = sandbox.KV(w, w)
		}
		produced += int64(len(rows))
		if latest, err = countRound(ctx, env, app, words, counts, rows, base, produced); err != nil {
			return err
		}
		if csvErr != nil {
			return csvErr
		}
		fmt.Fprintf(out, "in       %s\nout      %s   (initial state rows applied by this run: %d)\n",
			strings.Join(round, " "), format(latest), app.Metrics().Total.InitialStateRows)
	}
	return nil
}

// countRound runs app until the counts on the output topic add up to the
// produced rows (counted from base), then stops it, and returns the
// latest count of every key with output.
func countRound(ctx context.Context, env *sandbox.Env, app *kstate.App[string, string, int64], words, counts string,
	rows []sandbox.Row[string, string], base map[string]int64, produced int64) (latest map[string]int64, err error) {
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	if err := sandbox.Produce(running, env, words, serde.String(), serde.String(), rows...); err != nil {
		return nil, err
	}
	return sandbox.AwaitCounts(running, env, counts, base, produced)
}

// format prints counts as "x=12 y=100", sorted by key.
func format(counts map[string]int64) string {
	var kv []string
	for k, n := range counts {
		kv = append(kv, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
