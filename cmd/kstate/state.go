package main

import (
	"bufio"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"os/signal"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/internal/rescale"
	"github.com/kstate/kstate/statereader"
)

// Exit codes of the kstate command, for scripts.
const (
	exitOK       = 0 // success
	exitError    = 1 // any failure not below (Kafka, disk, corrupt state)
	exitUsage    = 2 // bad flags or arguments
	exitNotFound = 3 // the application, variable or key has no state
)

// codeError carries an exit code.
type codeError struct {
	code int
	err  error
}

func (e *codeError) Error() string { return e.err.Error() }
func (e *codeError) Unwrap() error { return e.err }

func usageErr(format string, args ...any) error {
	return &codeError{exitUsage, fmt.Errorf(format, args...)}
}

// exitCode maps an error of a command to the process exit code.
func exitCode(err error) int {
	var ce *codeError
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, statereader.ErrNoState), errors.Is(err, statereader.ErrVariableNotFound), errors.Is(err, rescale.ErrNoSource),
		errors.Is(err, statereader.ErrBatchNotReadable):
		return exitNotFound
	case errors.Is(err, rescale.ErrRefused):
		return exitRefused
	}
	return exitError
}

const stateExitCodes = `Exit codes: 0 success; 1 error (Kafka unreachable, unreadable state);
2 usage (bad or missing flags); 3 not found (no state for the application,
no such variable, --key has no entries, or --batch is not readable).`

// stateFlags are the source flags every `kstate state` command takes.
type stateFlags struct {
	brokers  string
	app      string
	stateDir string
	quiet    bool
	sec      securityFlags
	extra    []statereader.Option // set by a command's own flags (read --batch)
}

func (f *stateFlags) add(cmd *cobra.Command) {
	cmd.Flags().StringVar(&f.brokers, "brokers", "", "Kafka bootstrap servers, comma-separated: read the changelog topic")
	cmd.Flags().StringVar(&f.app, "app", "", "the application id (Options.ApplicationID); required")
	cmd.Flags().StringVar(&f.stateDir, "state-dir", "", "read the local state under this directory (Options.State.Dir) instead of the changelog")
	cmd.Flags().BoolVarP(&f.quiet, "quiet", "q", false, "no progress line on stderr")
	f.sec.add(cmd)
}

// open opens the reader the flags name.
func (f *stateFlags) open(cmd *cobra.Command) (*statereader.Reader, error) {
	if f.app == "" {
		return nil, usageErr("--app is required")
	}
	if err := checkAppFlag("--app", f.app); err != nil {
		return nil, err
	}
	if (f.brokers == "") == (f.stateDir == "") {
		return nil, usageErr("give exactly one of --brokers (read the changelog) and --state-dir (read local state)")
	}
	if f.stateDir != "" {
		return statereader.OpenStateDir(f.stateDir, f.app, f.extra...)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	kopts, err := f.sec.opts()
	if err != nil {
		return nil, err
	}
	opts := []statereader.Option{statereader.WithKafkaOptions(kopts...)}
	if !f.quiet {
		opts = append(opts, statereader.WithProgress(progressLine(cmd.ErrOrStderr())))
	}
	return statereader.OpenChangelog(ctx, strings.Split(f.brokers, ","), f.app, append(opts, f.extra...)...)
}

// progressLine prints "read N/M records (P%)" on w, rewritten in place, for
// reads of more than 100k records, and ends it with a newline.
func progressLine(w io.Writer) func(read, total int64) {
	start := time.Now()
	shown := false
	return func(read, total int64) {
		if total < 100_000 && !shown {
			return
		}
		shown = true
		pct := 100.0
		if total > 0 {
			pct = 100 * float64(read) / float64(total)
		}
		el := time.Since(start).Seconds()
		rate := 0.0
		if el > 0 {
			rate = float64(read) / el
		}
		fmt.Fprintf(w, "\rread %d/%d changelog records (%.0f%%, %.0f records/s)", read, total, pct, rate)
		if read >= total {
			fmt.Fprintln(w)
		}
	}
}

func newStateCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "state",
		Short: "Read an application's state: metadata, values, timers, export",
		Long: `Read an application's state without its Go types and without stopping it,
straight from its changelog topic (--brokers; read_committed, every partition
up to the end captured at start, no local files needed) or from its local
state directory (--state-dir, the application's Options.State.Dir; RocksDB
opened read-only).

Values are decoded with the codec schema each variable was declared with:
numbers, booleans, strings, JSON and Avro records as JSON (each value with
the schema version it was written under); bytes and values of codecs
without a known schema as base64 strings (marked "valueEncoding":"base64").
Grouping keys are the application's key bytes: the string when valid UTF-8,
else base64 (marked "keyEncoding":"base64").

` + stateExitCodes,
	}
	cmd.AddCommand(newStateMetadataCmd(), newStateReadCmd(), newStateTimersCmd(), newStateExportCmd(), newStateRescaleCmd())
	return cmd
}

func newStateMetadataCmd() *cobra.Command {
	var f stateFlags
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "metadata",
		Short: "Variables (kind, schemas, TTL) and per-partition modes, batch ids, watermarks",
		Example: `  kstate state metadata --brokers localhost:9092 --app orders
  kstate state metadata --state-dir /var/lib/kstate --app orders --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rd, err := f.open(cmd)
			if err != nil {
				return err
			}
			md := rd.Metadata()
			out := cmd.OutOrStdout()
			if asJSON {
				enc := json.NewEncoder(out)
				enc.SetIndent("", "  ")
				return enc.Encode(md)
			}
			printMetadata(out, md)
			return nil
		},
	}
	f.add(cmd)
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON instead of tables")
	return cmd
}

func printMetadata(w io.Writer, md statereader.Metadata) {
	fmt.Fprintf(w, "application %s (%s)\n\n", md.ApplicationID, md.Source)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "VARIABLE\tKIND\tSCHEMA\tKEY SCHEMA\tTTL\tPARTITIONS")
	for _, v := range md.Variables {
		ttl := "-"
		if v.TTL > 0 {
			ttl = v.TTL.String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%d\n", v.Name, v.Kind, dash(v.Schema), dash(v.KeySchema), ttl, v.Partitions)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PARTITION\tTIME MODE\tOUTPUT MODE\tBATCH\tWATERMARK\tINPUT OFFSET\tINITIAL STATE\tENTRIES")
	for _, p := range md.Partitions {
		wm := "-"
		if p.Watermark != nil && *p.Watermark != -1<<63 {
			wm = statereader.FormatMs(*p.Watermark)
		}
		init := "-"
		if p.InitialStateApplied {
			init = "applied"
		}
		in := optInt(p.InputOffset)
		// Several input topics: the first topic's offset, then the
		// others' as topic=offset.
		for _, t := range slices.Sorted(maps.Keys(p.InputOffsets)) {
			in += fmt.Sprintf(" %s=%d", t, p.InputOffsets[t])
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\n", p.Partition, dash(p.TimeMode), dash(p.OutputMode),
			optInt(p.BatchID), wm, in, init, p.Entries)
	}
	tw.Flush()
}

func dash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func optInt(p *int64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprint(*p)
}

// queryFlags are the selection flags of read, timers and export.
type queryFlags struct {
	key       string
	keyBase64 string
	partition int32
	limit     int
}

func (q *queryFlags) add(cmd *cobra.Command, key bool) {
	if key {
		cmd.Flags().StringVar(&q.key, "key", "", "only this grouping key (its UTF-8 string); from the changelog only its partition (murmur2) is read, or --partition")
		cmd.Flags().StringVar(&q.keyBase64, "key-base64", "", `only this grouping key, given as base64 (for keys printed with "keyEncoding":"base64")`)
	}
	cmd.Flags().Int32Var(&q.partition, "partition", -1, "only this partition")
	cmd.Flags().IntVar(&q.limit, "limit", 0, "stop after N lines (0: no limit)")
}

func (q *queryFlags) query(cmd *cobra.Command) (statereader.Query, error) {
	var out statereader.Query
	if q.limit < 0 {
		return out, usageErr("--limit must not be negative, got %d", q.limit)
	}
	out.Limit = q.limit
	if cmd.Flags().Changed("key") && cmd.Flags().Changed("key-base64") {
		return out, usageErr("give --key or --key-base64, not both")
	}
	if cmd.Flags().Changed("key") {
		out.Key = []byte(q.key)
	}
	if cmd.Flags().Changed("key-base64") {
		b, err := base64.StdEncoding.DecodeString(q.keyBase64)
		if err != nil {
			return out, usageErr("--key-base64 %q: %v", q.keyBase64, err)
		}
		out.Key, q.key = b, q.keyBase64
	}
	if q.partition >= 0 {
		out.Partitions = []int32{q.partition}
	} else if cmd.Flags().Changed("partition") {
		return out, usageErr("--partition must not be negative, got %d", q.partition)
	}
	return out, nil
}

// atBatch makes f open partition as of batch (read --batch).
func atBatch(f *stateFlags, partition int32, batch int64, hasPartition bool) error {
	switch {
	case batch < 0:
		return usageErr("--batch must not be negative, got %d", batch)
	case !hasPartition:
		return usageErr("--batch needs --partition: batch ids are per partition (kstate state metadata lists each partition's last batch)")
	case f.stateDir != "":
		return usageErr("--batch reads the changelog's history: give --brokers, not --state-dir (local state holds the latest state only)")
	}
	f.extra = append(f.extra, statereader.AtBatch(partition, batch))
	return nil
}

// writeLines writes each item as one JSON line.
func writeLines[T any](w io.Writer, items []T) error {
	bw := bufio.NewWriterSize(w, 1<<16)
	enc := json.NewEncoder(bw)
	for _, it := range items {
		if err := enc.Encode(it); err != nil {
			return err
		}
	}
	return bw.Flush()
}

func newStateReadCmd() *cobra.Command {
	var f stateFlags
	var q queryFlags
	var variable string
	var batch int64
	cmd := &cobra.Command{
		Use:   "read --var NAME",
		Short: "Print a variable's values, list elements or map entries as JSON lines",
		Long: `Print a variable's entries as JSON lines, one per ValueState value, ListState
element ("index": its position) or MapState entry ("mapKey"), ordered by
partition, grouping key and position:

  {"partition":0,"key":"u1","variable":"sessions","kind":"map","mapKey":"s2","value":["help"]}

"expiryMs" is the TTL expiry of variables with a TTL.

--batch N --partition P reads partition P as of its batch N (the id its sinks
received; kstate state metadata shows the last one): the changelog replayed up
to the end of that batch. Only the changelog has history (--brokers), and only
until compaction removes it: an older batch, or one not committed yet, exits 3
naming the oldest and latest readable batches.

` + stateExitCodes,
		Example: `  kstate state read --brokers localhost:9092 --app orders --var count
  kstate state read --brokers localhost:9092 --app orders --var count --key user-42
  kstate state read --state-dir /var/lib/kstate --app orders --var sessions --partition 3 --limit 10
  kstate state read --brokers localhost:9092 --app orders --var count --partition 3 --batch 41`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if variable == "" {
				return usageErr("--var is required (list the variables with kstate state metadata)")
			}
			query, err := q.query(cmd)
			if err != nil {
				return err
			}
			if cmd.Flags().Changed("batch") {
				if err := atBatch(&f, q.partition, batch, cmd.Flags().Changed("partition")); err != nil {
					return err
				}
			}
			rd, err := f.openSelected(cmd, query)
			if err != nil {
				return err
			}
			entries, err := rd.Read(variable, query)
			if err != nil {
				return err
			}
			if err := writeLines(cmd.OutOrStdout(), entries); err != nil {
				return err
			}
			if query.Key != nil && len(entries) == 0 {
				return &codeError{exitNotFound, fmt.Errorf("variable %q has no entry for key %q", variable, q.key)}
			}
			return nil
		},
	}
	f.add(cmd)
	q.add(cmd, true)
	cmd.Flags().StringVar(&variable, "var", "", "the state variable's name; required")
	cmd.Flags().Int64Var(&batch, "batch", -1, "read --partition as of this batch id (changelog only, while it holds the batch's history)")
	return cmd
}

func newStateTimersCmd() *cobra.Command {
	var f stateFlags
	var q queryFlags
	cmd := &cobra.Command{
		Use:   "timers",
		Short: "Print the registered timers as JSON lines, with their expiry",
		Long: `Print the registered timers as JSON lines, ordered by partition, grouping
key and expiry; "expiry" is RFC 3339 in UTC with milliseconds, "expiryMs"
the same in ms since the epoch:

  {"partition":1,"key":"s2","expiryMs":1735732810000,"expiry":"2025-01-01T12:00:10.000Z"}

` + stateExitCodes,
		Example: `  kstate state timers --brokers localhost:9092 --app heartbeat
  kstate state timers --state-dir /var/lib/kstate --app heartbeat --key sensor-7`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			query, err := q.query(cmd)
			if err != nil {
				return err
			}
			rd, err := f.openSelected(cmd, query)
			if err != nil {
				return err
			}
			timers, err := rd.Timers(query)
			if err != nil {
				return err
			}
			if err := writeLines(cmd.OutOrStdout(), timers); err != nil {
				return err
			}
			if query.Key != nil && len(timers) == 0 {
				return &codeError{exitNotFound, fmt.Errorf("no timer for key %q", q.key)}
			}
			return nil
		},
	}
	f.add(cmd)
	q.add(cmd, true)
	return cmd
}

func newStateExportCmd() *cobra.Command {
	var f stateFlags
	var q queryFlags
	var outPath string
	cmd := &cobra.Command{
		Use:   "export",
		Short: "Write every variable's entries and the timers as JSON lines, for a new application's initial state",
		Long: `Write the entries of every variable as JSON lines (the lines of kstate state
read, for all variables), ordered by partition, variable, key and position,
each partition's followed by its timers, one line each with "kind":"timer"
and the expiry (ms since the epoch) as the value:

  {"partition":1,"key":"s2","variable":"","kind":"timer","value":1735732810000}

A new application reads such a file as its initial state with
kstate.InitialStateFromJSONL, which hands each line to a decode function;
its HandleInitialState can register the timers again. From the changelog
the partitions are read one at a time: memory holds one partition's state.

` + stateExitCodes,
		Example: `  kstate state export --brokers localhost:9092 --app orders --out orders-state.jsonl
  kstate state export --state-dir /var/lib/kstate --app orders > orders-state.jsonl`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) (err error) {
			query, err := q.query(cmd)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			if outPath != "" && outPath != "-" {
				file, err := os.Create(outPath)
				if err != nil {
					return err
				}
				defer func() {
					if cerr := file.Close(); err == nil {
						err = cerr
					}
				}()
				w = file
			}
			lines, err := f.exportStream(cmd, query, w)
			if err != nil {
				return err
			}
			if outPath != "" && outPath != "-" {
				fmt.Fprintf(cmd.ErrOrStderr(), "exported %d lines (entries and timers) to %s\n", lines, outPath)
			}
			return nil
		},
	}
	f.add(cmd)
	q.add(cmd, false)
	cmd.Flags().StringVarP(&outPath, "out", "o", "", "write to this file instead of stdout")
	return cmd
}

// runCLI runs the kstate command with args and returns its exit code.
func runCLI(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	root := newRootCmd()
	root.SetArgs(args)
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return &codeError{exitUsage, err} })
	err := root.ExecuteContext(ctx)
	if err != nil {
		fmt.Fprintln(stderr, "kstate:", err)
		if isUsage(err) {
			return exitUsage
		}
	}
	return exitCode(err)
}

// isUsage recognises cobra's own argument errors (unknown command,
// unexpected arguments), which do not go through the flag error function.
func isUsage(err error) bool {
	var ce *codeError
	if errors.As(err, &ce) {
		return false
	}
	s := err.Error()
	return strings.HasPrefix(s, "unknown command") || strings.Contains(s, "unknown flag") ||
		strings.HasPrefix(s, "accepts ") || strings.HasPrefix(s, "required flag")
}
