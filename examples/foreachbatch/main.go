// Command foreachbatch writes per-key results to a SQLite database with a
// kstate foreachBatch sink (Config.Sinks), exactly once: each partition's
// batch arrives with a batch id that is stable across retries, and the
// sink (package sqlsink) writes the rows and the partition's high-water
// mark in one SQL transaction, skipping a batch it already wrote. There is
// no output topic: the database is the only destination.
//
// Input a a a b b gives a=3 b=2 in the table; a c continues to a=4 b=2 c=1;
// after a restart of the application, b gives b=3.
//
//	go run ./examples/foreachbatch                           # embedded Kafka, a temporary database
//	go run ./examples/foreachbatch --db counts.db --brokers localhost:9092
package main

import (
	"context"
	"database/sql"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"

	_ "modernc.org/sqlite" // the "sqlite" database/sql driver

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Counter counts the rows of each key and emits the key's new count once
// per batch: the per-key result the sink upserts.
type Counter struct {
	processor.Defaults[string, string]

	count state.ValueState[int64]
}

func (c *Counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *Counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
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
	return out.Emit(strconv.FormatInt(n, 10))
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	dbPath := flag.String("db", "", "SQLite database file (default: counts.db in a temporary directory)")
	flag.Parse()
	// SIGTERM or Ctrl-C cancels Run's context: the batch in flight commits
	// (or not at all) and Run returns nil.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, *dbPath, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "foreachbatch:", err)
		os.Exit(1)
	}
}

// run counts three rounds of words (the third after a restart of the
// application) and prints the database table after each.
func run(ctx context.Context, brokers []string, stateDir, dbPath string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	if dbPath == "" {
		dir, err := os.MkdirTemp("", "foreachbatch")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		dbPath = filepath.Join(dir, "counts.db")
	}
	db, err := sql.Open("sqlite", "file:"+dbPath+"?_pragma=journal_mode(WAL)&_pragma=busy_timeout(5000)")
	if err != nil {
		return err
	}
	defer db.Close()
	sink, err := sqlsink.Open(ctx, db, sqlsink.SQLite, "counts", false)
	if err != nil {
		return err
	}
	words := env.Name("words")
	if err := env.CreateTopics(ctx, 3, words); err != nil {
		return err
	}
	top := topology(words, sink)
	opts := env.Options("foreachbatch")
	for i, rounds := range [][][]string{{{"a", "a", "a", "b", "b"}, {"a", "c"}}, {{"b"}}} {
		if i > 0 {
			fmt.Fprintln(out, "(application restarted)")
		}
		if err := runApp(ctx, env, top, opts, sink, words, rounds, out); err != nil {
			return err
		}
	}
	return nil
}

// topology is the application: the words of topic counted per word, each
// batch's counts written to sink. driver_test.go runs it on kstatetest's
// driver.
func topology(topic string, sink kstate.Sink[string, string]) kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), topic),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
		Output: kstate.Output[string, string]{
			// No Topic: the rows go to the sink only.
			Sinks: []kstate.Sink[string, string]{sink},
		},
	}
}

// runApp runs the application for some rounds of input and stops it.
func runApp(ctx context.Context, env *sandbox.Env, top kstate.Topology[string, string, string], opts kstate.Options, sink *sqlsink.Sink, words string, rounds [][]string, out io.Writer) (err error) {
	app, err := kstate.New(top, opts)
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()
	for _, round := range rounds {
		rows := make([]sandbox.Row[string, string], len(round))
		for i, w := range round {
			rows[i] = sandbox.KV(w, w)
		}
		want := app.Metrics().Total.RowsIn + int64(len(rows))
		if err := sandbox.Produce(running, env, words, serde.String(), serde.String(), rows...); err != nil {
			return err
		}
		// A batch counts once committed, and its sink ran before the commit.
		if err := sandbox.Until(running, "the words counted", func() bool { return app.Metrics().Total.RowsIn >= want }); err != nil {
			return err
		}
		table, err := sink.Table(running)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "in   %s\ndb   %s\n", strings.Join(round, " "), format(table))
	}
	return nil
}

// format prints the table as "a=3 b=2", sorted by key.
func format(table map[string]string) string {
	var kv []string
	for k, v := range table {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
