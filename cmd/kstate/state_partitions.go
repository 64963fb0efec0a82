package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"

	"github.com/spf13/cobra"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/statereader"
)

// Reading part of a changelog: `state read --key` and `state timers --key`
// read the key's partition only (murmur2 of the key bytes, as the
// application routes it), --partition the one named; `state export` reads
// one partition at a time, so that it holds one partition's state, not the
// application's.

// partitionReads counts changelog partitions read by openPartition (tests).
var partitionReads int

// changelogClient is the Kafka client config of the flags.
func (f *stateFlags) changelogClient() (kafka.ClientConfig, error) {
	kopts, err := f.sec.opts()
	if err != nil {
		return kafka.ClientConfig{}, err
	}
	return kafka.ClientConfig{Brokers: strings.Split(f.brokers, ","), Extra: kopts}, nil
}

// changelogPartitions returns the changelog topic's partition count.
func (f *stateFlags) changelogPartitions(ctx context.Context, cc kafka.ClientConfig) (int, error) {
	adm, err := cc.NewAdmin()
	if err != nil {
		return 0, err
	}
	defer adm.Close()
	topic := f.app + "-changelog"
	n, err := adm.Partitions(ctx, topic)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return 0, fmt.Errorf("%w: application %q has no changelog topic %q (wrong --app, or it never ran)", statereader.ErrNoState, f.app, topic)
	}
	return n, err
}

// openSelected opens the reader for q: from the changelog, only the
// partitions q selects (its Partitions, else the key's partition); all of
// them without a key or partition, and from a state directory (f.open).
func (f *stateFlags) openSelected(cmd *cobra.Command, q statereader.Query) (*statereader.Reader, error) {
	// Options of the command's own flags (read --batch: the history) need
	// the full reader.
	if f.app == "" || f.brokers == "" || f.stateDir != "" || len(f.extra) > 0 || (q.Key == nil && len(q.Partitions) == 0) {
		return f.open(cmd)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	cc, err := f.changelogClient()
	if err != nil {
		return nil, err
	}
	n, err := f.changelogPartitions(ctx, cc)
	if err != nil {
		return nil, err
	}
	parts := q.Partitions
	if len(parts) == 0 {
		parts = []int32{murmur2.Partition(q.Key, n)}
	}
	raw := make(map[int32]map[string][]byte, len(parts))
	for _, p := range parts {
		if p >= int32(n) {
			return nil, usageErr("--partition %d: the changelog topic of %q has %d partitions", p, f.app, n)
		}
		m, err := f.readPartition(ctx, cc, p, cmd.ErrOrStderr())
		if err != nil {
			return nil, err
		}
		raw[p] = m
	}
	return statereader.FromEntries(f.app, raw)
}

// readPartition reads changelog partition p's compaction view up to its
// last stable offset at open.
func (f *stateFlags) readPartition(ctx context.Context, cc kafka.ClientConfig, p int32, stderr io.Writer) (map[string][]byte, error) {
	topic := f.app + "-changelog"
	r, err := cc.NewPartitionReader(ctx, topic, p, 0)
	if err != nil {
		return nil, fmt.Errorf("statereader: %w", err)
	}
	defer r.Close()
	partitionReads++
	var progress func(n int)
	if !f.quiet {
		line, total, read := progressLine(stderr), r.End()-r.Position(), int64(0)
		progress = func(n int) { read += int64(n); line(read, total) }
	}
	m, err := r.ReadView(ctx, progress)
	if err != nil {
		return nil, fmt.Errorf("statereader: read %s partition %d: %w", topic, p, err)
	}
	return m, nil
}

// exportStream writes the export of the flags' application to w: every
// variable's entries, then the timers, partition by partition, reading
// (from the changelog) one partition at a time. It returns the lines
// written.
func (f *stateFlags) exportStream(cmd *cobra.Command, q statereader.Query, w io.Writer) (int, error) {
	if f.app == "" || (f.brokers == "") == (f.stateDir == "") {
		_, err := f.open(cmd) // the usage error
		return 0, err
	}
	if f.stateDir != "" {
		rd, err := f.open(cmd)
		if err != nil {
			return 0, err
		}
		return exportReader(rd, q, w)
	}
	ctx, stop := signal.NotifyContext(cmd.Context(), os.Interrupt)
	defer stop()
	cc, err := f.changelogClient()
	if err != nil {
		return 0, err
	}
	n, err := f.changelogPartitions(ctx, cc)
	if err != nil {
		return 0, err
	}
	parts := q.Partitions
	if len(parts) == 0 {
		for p := range int32(n) {
			parts = append(parts, p)
		}
	}
	lines := 0
	for _, p := range parts {
		if p >= int32(n) {
			return lines, usageErr("--partition %d: the changelog topic of %q has %d partitions", p, f.app, n)
		}
		m, err := f.readPartition(ctx, cc, p, cmd.ErrOrStderr())
		if err != nil {
			return lines, err
		}
		rd, err := statereader.FromEntries(f.app, map[int32]map[string][]byte{p: m})
		if err != nil {
			return lines, err
		}
		m = nil
		pq := q
		pq.Partitions = []int32{p}
		if q.Limit > 0 {
			pq.Limit = q.Limit - lines
		}
		k, err := exportReader(rd, pq, w)
		lines += k
		if err != nil || (q.Limit > 0 && lines >= q.Limit) {
			return lines, err
		}
	}
	return lines, nil
}

// TimerKind is the "kind" of the export lines of timers: a
// statereader.Entry with no variable, whose value is the timer's expiry in
// ms since the epoch.
const timerKind = "timer"

// exportReader writes rd's entries selected by q, then its timers, as JSON
// lines; at most q.Limit lines when positive.
func exportReader(rd *statereader.Reader, q statereader.Query, w io.Writer) (int, error) {
	entries, err := rd.ReadAll(q)
	if err != nil {
		return 0, err
	}
	if err := writeLines(w, entries); err != nil {
		return 0, fmt.Errorf("export: %w", err)
	}
	lines := len(entries)
	if q.Limit > 0 && lines >= q.Limit {
		return lines, nil
	}
	tq := q
	if q.Limit > 0 {
		tq.Limit = q.Limit - lines
	}
	timers, err := rd.Timers(tq)
	if err != nil {
		return lines, err
	}
	out := make([]statereader.Entry, 0, len(timers))
	for _, t := range timers {
		out = append(out, statereader.Entry{Partition: t.Partition, Key: t.Key, KeyEncoding: t.KeyEncoding, Kind: timerKind,
			Value: fmt.Appendf(nil, "%d", t.ExpiryMs)})
	}
	if err := writeLines(w, out); err != nil {
		return lines, fmt.Errorf("export: %w", err)
	}
	return lines + len(out), nil
}
