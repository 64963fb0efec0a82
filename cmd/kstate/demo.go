package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/kafka/embedded"
)

func newDemoCmd() *cobra.Command {
	o := demoOptions{story: defaultDemoStory()}
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Run a short scripted story with the real engine on an embedded Kafka",
		Long: `demo starts an in-process Kafka (franz-go's kfake) and a temporary state
directory, and runs kstate applications against them with the real engine:
a counter (ValueState), a counter with initial state, a sensor heartbeat
monitor with processing-time timers, and a restart that restores the
monitor's state from its changelog topic.

Every step checks what the applications actually wrote to Kafka. demo exits
with status 0 only if every expected value was observed; otherwise it says
what differed and exits with status 1.`,
		Example: "  make demo\n  go run ./cmd/kstate demo\n  kstate demo --verbose",
		Args:    cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			// Ctrl-C stops the applications and removes the temporary
			// state directory instead of leaving it behind.
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt, syscall.SIGTERM)
			defer stop()
			ctx, cancel := context.WithTimeout(ctx, o.timeout)
			defer cancel()
			if o.verbose {
				o.log = cmd.ErrOrStderr()
			}
			return runDemo(ctx, cmd.OutOrStdout(), o)
		},
	}
	cmd.Flags().DurationVar(&o.timeout, "timeout", 2*time.Minute, "give up after this long")
	cmd.Flags().BoolVarP(&o.verbose, "verbose", "v", false, "print the engine's log (assignments, restores, commits) to stderr")
	return cmd
}

type demoOptions struct {
	timeout time.Duration
	verbose bool
	log     io.Writer // the engine's log; nil: discarded
	story   demoStory // what the demo does and expects
}

// demo is one run of the story: the cluster, the output and the checks.
type demo struct {
	w        io.Writer
	logger   *slog.Logger
	brokers  []string
	stateDir string
	prod     *kafka.Producer

	checks   int
	failures []string
}

// demoTopics are created at start, with demoPartitions partitions each.
var demoTopics = []string{"counter-in", "counter-out", "initial-in", "initial-out", "heartbeats", "sensor-events"}

const demoPartitions = 3

// runDemo runs the story and returns nil only if every check passed.
func runDemo(ctx context.Context, w io.Writer, o demoOptions) error {
	began := time.Now()
	topics := make(map[string]int, len(demoTopics))
	for _, t := range demoTopics {
		topics[t] = demoPartitions
	}
	emb, err := embedded.Start(embedded.Options{Topics: topics})
	if err != nil {
		return fmt.Errorf("demo: start the embedded Kafka: %w", err)
	}
	defer emb.Close()
	dir, err := os.MkdirTemp("", "kstate-demo-")
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer os.RemoveAll(dir)
	prod, err := kafka.NewProducer(emb.Brokers())
	if err != nil {
		return fmt.Errorf("demo: %w", err)
	}
	defer prod.Close()

	d := &demo{w: w, brokers: emb.Brokers(), stateDir: dir, prod: prod, logger: slog.New(slog.DiscardHandler)}
	if o.log != nil {
		d.logger = slog.New(slog.NewTextHandler(o.log, nil))
	}
	fmt.Fprintf(w, "kstate demo: stateful stream processing on Kafka, exactly once\n\n")
	fmt.Fprintf(w, "      %-9s embedded in-process Kafka (kfake) at %s\n", "Kafka", strings.Join(d.brokers, ","))
	fmt.Fprintf(w, "      %-9s %s (a RocksDB shard per application and partition)\n", "state", dir)
	fmt.Fprintf(w, "      %-9s %d partitions per topic; every batch commits its outputs, state\n", "topics", demoPartitions)
	fmt.Fprintf(w, "      %-9s changes and input offsets in one Kafka transaction\n", "")

	err = o.story.run(ctx, d)
	if err != nil {
		d.failures = append(d.failures, err.Error())
		fmt.Fprintf(w, "FAIL  %v\n", err)
	}
	elapsed := time.Since(began).Round(100 * time.Millisecond)
	if len(d.failures) > 0 {
		fmt.Fprintf(w, "\n%d of %d checks failed (%v)\n", len(d.failures), max(d.checks, len(d.failures)), elapsed)
		return fmt.Errorf("demo: %s", strings.Join(d.failures, "; "))
	}
	fmt.Fprintf(w, "\nall %d checks passed in %v\n\n", d.checks, elapsed)
	fmt.Fprint(w, `next
      examples/             one program per feature: go run ./examples/heartbeat
      README.md             the processor API, configuration, running on your cluster
      docs/ARCHITECTURE.md  micro-batches, transactions, the changelog and restore
      make test             unit, embedded-Kafka and real-broker tests
`)
	return nil
}

// section starts a numbered part of the story.
func (d *demo) section(title string) { fmt.Fprintf(d.w, "\n%s\n", title) }

// line prints a step that checks nothing.
func (d *demo) line(what, input, result string) { d.row("", what, input, result) }

// note explains the step above.
func (d *demo) note(text string) { fmt.Fprintf(d.w, "%41s(%s)\n", "", text) }

// row prints a step: mark ("ok", "FAIL" or ""), what, input and result.
// A result listing several events ("a; b") gets one line per event.
func (d *demo) row(mark, what, input, result string) {
	for i, r := range strings.Split(result, "; ") {
		if i == 0 && r != "" {
			r = "→ " + r
		} else if i > 0 {
			mark, what, input, r = "", "", "", "  "+r
		}
		fmt.Fprintln(d.w, strings.TrimRight(fmt.Sprintf("%4s  %-9s %-22s %s", mark, what, input, r), " "))
	}
}

// check prints a step and records whether got is what the story wanted.
func (d *demo) check(what, input, want, got string) {
	d.checkf(got == want, what, input, got, want)
}

// checkf prints a step with its result and records whether ok; want says
// what was expected instead.
func (d *demo) checkf(ok bool, what, input, result, want string) {
	d.checks++
	if ok {
		d.row("ok", what, input, result)
		return
	}
	d.row("FAIL", what, input, result)
	d.row("", "", "wanted", want)
	d.failures = append(d.failures, fmt.Sprintf("%s %s: got %q, want %q", what, input, result, want))
}

// errDemoStopped is returned by waits when the application under way stopped.
var errDemoStopped = errors.New("the application stopped")

// demoWaitFor polls cond until it holds; it fails after demoWait, or as soon
// as running ends (the application stopped, or the demo's timeout).
func demoWaitFor(running context.Context, what string, cond func() bool) error {
	ctx, cancel := context.WithTimeout(running, demoWait)
	defer cancel()
	tick := time.NewTicker(10 * time.Millisecond)
	defer tick.Stop()
	for !cond() {
		select {
		case <-ctx.Done():
			if cause := context.Cause(running); cause != nil {
				return fmt.Errorf("waiting for %s: %w", what, cause)
			}
			return fmt.Errorf("waited %v for %s", demoWait, what)
		case <-tick.C:
		}
	}
	return nil
}

// demoWait bounds each wait for the engine; the demo takes seconds.
const demoWait = 30 * time.Second
