// Command groupby counts sign-ins per country from records keyed by user
// id: the grouping key (the country, in the value) is not the record key,
// so Topology.GroupBy re-keys the input through the internal topic
// "<app>-repartition", exactly-once in both stages (see kstate.GroupBy).
//
//	go run ./examples/groupby                           # embedded Kafka
//	go run ./examples/groupby --brokers localhost:9092  # your cluster
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

// PerCountry counts the sign-ins of each country. Its key is the country;
// rows are the countries of the sign-ins.
type PerCountry struct {
	processor.Defaults[string, int64]

	count state.ValueState[int64]
}

func (c *PerCountry) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *PerCountry) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
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

// country is the GroupBy key: the value of a sign-in record is its
// country; the record key, the user id, is not used.
func country(_ []byte, value string) (string, error) {
	if value == "" {
		return "", fmt.Errorf("sign-in without a country")
	}
	return value, nil
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	// SIGTERM (a container stop) and Ctrl-C stop Run gracefully: the batch
	// in flight commits or aborts, nothing is lost.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "groupby:", err)
		os.Exit(1)
	}
}

// run counts two rounds of sign-ins per country and prints the latest
// count of every country after each.
func run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	signins, counts := env.Name("signins"), env.Name("signins-per-country")
	if err := env.CreateTopics(ctx, 3, signins, counts); err != nil {
		return err
	}
	app, err := kstate.New(kstate.Topology[string, string, int64]{
		Inputs:       kstate.Topics(serde.String(), signins), // key: user id; value: country
		GroupBy:      []kstate.GroupBy[string, string]{{Topic: signins, Key: country}},
		KeySerde:     serde.String(), // the grouping key: the country
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &PerCountry{} },
		Output: kstate.Output[string, int64]{
			Topic: counts, // record key: the country; value: its count
			Serde: serde.Int64(),
		},
	}, env.Options("groupby"))
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
	for _, round := range [][]sandbox.Row[string, string]{
		{sandbox.KV("alice", "de"), sandbox.KV("bob", "fr"), sandbox.KV("carol", "de"), sandbox.KV("dave", "it")},
		{sandbox.KV("erin", "fr"), sandbox.KV("alice", "de")},
	} {
		if err := sandbox.Produce(running, env, signins, serde.String(), serde.String(), round...); err != nil {
			return err
		}
		produced += int64(len(round))
		// Rows reach the processor in stage 2, from the repartition topic.
		// Counted once the counts on the output topic add up to every row produced.
		var err error
		if latest, err = sandbox.AwaitCounts(running, env, counts, nil, produced); err != nil {
			return err
		}
		var in []string
		for _, r := range round {
			in = append(in, r.Key+"@"+r.Value)
		}
		fmt.Fprintf(out, "in   %s\nout  %s\n", strings.Join(in, " "), format(latest))
	}
	return nil
}

// format prints counts as "de=2 fr=1", sorted by country.
func format(counts map[string]int64) string {
	var kv []string
	for k, n := range counts {
		kv = append(kv, fmt.Sprintf("%s=%d", k, n))
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
