package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/internal/rescale"
)

type rescaleFlags struct {
	brokers    string
	app, toApp string
	partitions int
	inputTopic string
	dryRun     bool
	timeout    time.Duration
	sec        securityFlags
}

func newStateRescaleCmd() *cobra.Command {
	var f rescaleFlags
	cmd := &cobra.Command{
		Use:   "rescale --brokers B --app A --partitions N --to-app B",
		Short: "Rebuild a stopped application's state for more input partitions, as a new application",
		Long: `Rebuild the state of the stopped application A for an input topic that
grew to N partitions, as the changelog of a new application B that continues
exactly where A stopped (docs/OPERATIONS.md, "Changing the number of input
partitions"):

  - reads A's changelog topic (read_committed, the compaction view);
  - writes "<B>-changelog" with N partitions, each grouping key's state,
    timers and TTL entries in the partition Kafka's default partitioner
    gives the key (murmur2(key) % N), and in every partition the merged
    metadata: the variable registry, the largest batch id, the smallest
    watermark, the initial-state flag, the time and output modes;
  - commits B's group offsets: A's committed offsets for A's partitions,
    the partition start for the new ones (each also recorded as the
    partition's input offset in the changelog).

Refused (exit code 4, nothing written): A's group has members (stop A);
B exists (committed offsets, or a changelog topic with records: the empty
one a failed rescale leaves is reused); the input topic does
not have exactly N partitions or N is not more than A's; the state of A's
partitions disagrees (a variable with different kinds or schema histories,
different time or output modes, one key in two partitions); variable ids
that differ between A's partitions are unified (keys rewritten); an input record
A has not processed (after its committed offsets, or in a new partition)
lies in a partition its key does not map to among N: run A until it is
caught up, with producers stopped or not yet writing to the new partitions.

Then run B (Options.ApplicationID = B) with the same code. --dry-run prints
the plan (per partition of B: keys and entries held and moved in, offset)
and changes nothing.

Exit codes: 0 success; 1 error; 2 usage; 3 A has no state (no changelog
topic or no committed offsets and no --input-topic); 4 refused.`,
		Example: `  kstate state rescale --brokers localhost:9092 --app orders --partitions 12 --to-app orders-v2 --dry-run
  kstate state rescale --brokers localhost:9092 --app orders --partitions 12 --to-app orders-v2`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
			defer stop()
			return runRescale(ctx, cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.brokers, "brokers", "", "Kafka bootstrap servers, comma-separated; required")
	fl.StringVar(&f.app, "app", "", "the stopped application to rescale (its Options.ApplicationID); required")
	fl.StringVar(&f.toApp, "to-app", "", "the new application id to write the rescaled state for; required, must not exist")
	fl.IntVar(&f.partitions, "partitions", 0, "the input topic's new partition count; required")
	fl.StringVar(&f.inputTopic, "input-topic", "", "the application's input topic (default: the one topic its group committed offsets for)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan, change nothing")
	fl.DurationVar(&f.timeout, "timeout", 10*time.Minute, "give up after this long")
	f.sec.add(cmd)
	return cmd
}

func runRescale(ctx context.Context, out io.Writer, f rescaleFlags) error {
	if f.brokers == "" || f.app == "" || f.toApp == "" || f.partitions <= 0 {
		return usageErr("--brokers, --app, --to-app and --partitions are required")
	}
	if f.app == f.toApp {
		return usageErr("--to-app must name a new application, not %q", f.app)
	}
	if err := checkAppFlag("--app", f.app); err != nil {
		return err
	}
	if err := checkAppFlag("--to-app", f.toApp); err != nil {
		return err
	}
	cc, err := f.sec.client(strings.Split(f.brokers, ","))
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, f.timeout)
	defer cancel()
	res, err := rescale.Run(ctx, cc, rescale.Options{From: f.app, To: f.toApp, Partitions: f.partitions, InputTopic: f.inputTopic, DryRun: f.dryRun})
	if err != nil {
		return err
	}
	p := res.Plan
	fmt.Fprintf(out, "rescale of application %q (%d partitions) to %q (%d partitions), input topic %s\n", f.app, p.From, f.toApp, p.To, res.InputTopic)
	fmt.Fprintf(out, "  variables: %d; next variable id %d\n", len(p.Variables), p.NextVarID)
	for _, r := range p.Remapped {
		fmt.Fprintf(out, "  %s\n", r)
	}
	show := func(name string, v *int64) {
		if v != nil {
			fmt.Fprintf(out, "  %s: %d\n", name, *v)
		}
	}
	show("batch id (max)", p.BatchID)
	show("watermark ms (min)", p.Watermark)
	show("late watermark ms (min)", p.LateWatermark)
	if p.InitialStateApplied {
		fmt.Fprintln(out, "  initial state: applied (not applied again)")
	}
	for _, pp := range p.Partitions {
		from := "start of the new partition"
		if _, ok := res.Committed[pp.Partition]; ok {
			from = fmt.Sprintf("%q's committed offset", f.app)
		} else if int(pp.Partition) < p.From {
			from = fmt.Sprintf("start (%q committed none)", f.app)
		}
		fmt.Fprintf(out, "  partition %d: %d keys (%d moved in), %d entries (%d moved in), %d records; input offset %d (%s)\n",
			pp.Partition, pp.Keys, pp.KeysMoved, pp.Entries, pp.Moved, pp.RecordCount, pp.InputOffset, from)
	}
	if !res.Written {
		fmt.Fprintln(out, "dry run: nothing changed")
		return nil
	}
	fmt.Fprintf(out, "rescale done: run application %q on %d partitions\n", f.toApp, p.To)
	return nil
}
