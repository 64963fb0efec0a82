package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/setoffsets"
	"github.com/kstate/kstate/internal/shard"
)

// exitRefused: kstate reset refused to change a group that has members.
const exitRefused = 4

type resetFlags struct {
	brokers     string
	app         string
	inputTopics []string
	dlqTopic    string
	toEarliest  bool
	toLatest    bool
	toDatetime  string
	stateDir    string
	dryRun      bool
	sec         securityFlags
}

// resetPlan is what a reset does.
type resetPlan struct {
	group   string
	state   string                // the group's state
	offsets map[string][][3]int64 // topic → (partition, from, to); from -1: no commit
	target  string
	// earliest: delete the group's offsets (a new application) instead
	// of committing offsets.
	earliest bool
	deletes  []string // existing topics to delete
	missing  []string // owned topics that do not exist
	local    string   // local state directory to remove, or ""
}

func newResetCmd() *cobra.Command {
	var f resetFlags
	cmd := &cobra.Command{
		Use:   "reset --brokers B --app A",
		Short: "Reset an application to reprocess its input: delete its changelog and DLQ, move its group's offsets",
		Long: `Reset an application (like Kafka Streams' application reset tool), so that
its next run starts with empty state and reads its input from the chosen
position:

  - deletes the topics the application owns: "<app>-changelog", the
    GroupBy repartition topic "<app>-repartition" (recreated empty by the
    next run: its records were forwarded from input that is read again)
    and the dead-letter topic ("<app>-dlq" by default; --dlq-topic for a
    custom Topology.DeadLetterTopic);
  - sets the group's committed offsets of its input topics (those the group
    has committed, or --input-topic) to the earliest offsets (default), the
    latest (--to-latest), or the first record at or after a time
    (--to-datetime 2025-01-01T12:00:00Z);
  - removes the local state <state-dir>/<app> when --state-dir is given
    (do it on every host that ran the application, or they restore nothing
    but keep stale shards: kstate discards them, at a cost). Only a
    directory kstate created is removed: one with the KSTATE_APP file Run
    writes, or one holding nothing but shard directories (older
    releases); any other is refused before anything is changed.

The application must be stopped: a group with members is refused (exit
code 4). A stopped instance with a static InstanceID stays a member until
Options.Kafka.SessionTimeout passes. --dry-run prints the plan and changes nothing.
The output topic is not touched: a reprocessing run appends to it.

Exit codes: 0 success; 1 error; 2 usage; 3 the group has no committed
offsets and no --input-topic was given; 4 refused (the group has members).`,
		Example: `  kstate reset --brokers localhost:9092 --app orders --dry-run
  kstate reset --brokers localhost:9092 --app orders --state-dir /var/lib/kstate
  kstate reset --brokers localhost:9092 --app orders --to-datetime 2025-06-01T00:00:00Z`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReset(cmd.Context(), cmd.OutOrStdout(), f)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&f.brokers, "brokers", "", "Kafka bootstrap servers, comma-separated; required")
	fl.StringVar(&f.app, "app", "", "the application id (Options.ApplicationID, its group id); required")
	fl.StringSliceVar(&f.inputTopics, "input-topic", nil, "input topic whose offsets to reset (repeatable; default: every topic the group committed)")
	fl.StringVar(&f.dlqTopic, "dlq-topic", "", `the dead-letter topic to delete (default "<app>-dlq")`)
	fl.BoolVar(&f.toEarliest, "to-earliest", false, "reset offsets to the start of each partition (the default)")
	fl.BoolVar(&f.toLatest, "to-latest", false, "reset offsets to the end of each partition: skip what is there")
	fl.StringVar(&f.toDatetime, "to-datetime", "", "reset offsets to the first record at or after this RFC 3339 time")
	fl.StringVar(&f.stateDir, "state-dir", "", "also remove the application's local state under this directory (Options.State.Dir)")
	fl.BoolVar(&f.dryRun, "dry-run", false, "print the plan, change nothing")
	f.sec.add(cmd)
	return cmd
}

func runReset(ctx context.Context, out io.Writer, f resetFlags) error {
	if f.brokers == "" || f.app == "" {
		return usageErr("--brokers and --app are required")
	}
	if err := checkAppFlag("--app", f.app); err != nil {
		return err
	}
	if f.dlqTopic != "" {
		if err := kafka.CheckTopic(f.dlqTopic); err != nil {
			return usageErr("--dlq-topic %q: %v", f.dlqTopic, err)
		}
	}
	for _, t := range f.inputTopics {
		if err := kafka.CheckTopic(t); err != nil {
			return usageErr("--input-topic %q: %v", t, err)
		}
	}
	for _, b := range strings.Split(f.brokers, ",") {
		if err := kafka.CheckBroker(b); err != nil {
			return usageErr("--brokers: %q: %v", b, err)
		}
	}
	// The local state is checked first: a directory reset would refuse
	// to delete must stop it before it changes anything.
	local := ""
	if f.stateDir != "" {
		local = filepath.Join(f.stateDir, f.app)
		if err := checkLocalState(local, f.app); err != nil {
			return err
		}
	}
	n := 0
	for _, b := range []bool{f.toEarliest, f.toLatest, f.toDatetime != ""} {
		if b {
			n++
		}
	}
	if n > 1 {
		return usageErr("give at most one of --to-earliest, --to-latest and --to-datetime")
	}
	var at time.Time
	if f.toDatetime != "" {
		var err error
		if at, err = time.Parse(time.RFC3339Nano, f.toDatetime); err != nil {
			return usageErr("--to-datetime %q: want RFC 3339 (2025-01-01T12:00:00Z): %v", f.toDatetime, err)
		}
	}
	cc, err := f.sec.client(strings.Split(f.brokers, ","))
	if err != nil {
		return err
	}
	adm, err := cc.NewAdmin()
	if err != nil {
		return err
	}
	defer adm.Close()
	cl := adm.Kadm()
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	plan := resetPlan{group: f.app, offsets: map[string][][3]int64{}}
	// The group must be empty.
	groups, err := cl.DescribeGroups(ctx, f.app)
	if err != nil {
		return fmt.Errorf("reset: describe group %q: %w", f.app, err)
	}
	if g, ok := groups[f.app]; ok {
		if g.Err != nil && !errors.Is(g.Err, kerr.GroupIDNotFound) {
			return fmt.Errorf("reset: describe group %q: %w", f.app, g.Err)
		}
		plan.state = g.State
		if len(g.Members) > 0 {
			var ids []string
			for _, m := range g.Members {
				id := m.MemberID
				if m.InstanceID != nil {
					id = *m.InstanceID + " (static)"
				}
				ids = append(ids, id+" on "+m.ClientHost)
			}
			return &codeError{exitRefused, fmt.Errorf("reset refused: group %q is %s with %d member(s): %s; stop every instance of the application first (a stopped instance stays a static member until Options.Kafka.SessionTimeout passes, unless it ran with Options.Kafka.LeaveGroupOnShutdown)",
				f.app, g.State, len(g.Members), strings.Join(ids, ", "))}
		}
	}
	// Input topics and their current commits.
	committed, err := cl.FetchOffsets(ctx, f.app)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return fmt.Errorf("reset: committed offsets of group %q: %w", f.app, err)
	}
	topics := f.inputTopics
	if len(topics) == 0 {
		for t := range committed {
			if t == f.app+"-repartition" {
				continue // an owned topic, deleted: not an input to move
			}
			topics = append(topics, t)
		}
		slices.Sort(topics)
		if len(topics) == 0 {
			return &codeError{exitNotFound, fmt.Errorf("reset: group %q has no committed offsets: give the input topics with --input-topic", f.app)}
		}
	}
	if (f.toLatest || f.toDatetime != "") && len(topics) != 1 {
		return usageErr("--to-latest and --to-datetime need exactly one input topic (the application's first, Topology.Inputs[0]), have %v: give it with --input-topic", topics)
	}
	var target kadm.ListedOffsets
	switch {
	case f.toLatest:
		plan.target = "latest"
		target, err = cl.ListEndOffsets(ctx, topics...)
	case f.toDatetime != "":
		plan.target = "the first record at or after " + at.UTC().Format(time.RFC3339Nano)
		target, err = cl.ListOffsetsAfterMilli(ctx, at.UnixMilli(), topics...)
	default:
		plan.target = "earliest"
		plan.earliest = true
		target, err = cl.ListStartOffsets(ctx, topics...)
	}
	if err == nil {
		err = target.Error()
	}
	if err != nil {
		return fmt.Errorf("reset: list offsets of %v: %w", topics, err)
	}
	for _, t := range topics {
		ps := target[t]
		parts := make([]int32, 0, len(ps))
		for p := range ps {
			parts = append(parts, p)
		}
		slices.Sort(parts)
		for _, p := range parts {
			from := int64(-1)
			if r, ok := committed.Lookup(t, p); ok && r.Err == nil {
				from = r.At
			}
			plan.offsets[t] = append(plan.offsets[t], [3]int64{int64(p), from, ps[p].Offset})
		}
	}
	// Owned topics.
	dlq := f.dlqTopic
	if dlq == "" {
		dlq = f.app + "-dlq"
	}
	owned := []string{f.app + "-changelog", f.app + "-repartition", dlq}
	existing, err := cl.ListTopics(ctx, owned...)
	if err != nil {
		return fmt.Errorf("reset: list topics: %w", err)
	}
	for _, t := range owned {
		if d, ok := existing[t]; ok && d.Err == nil {
			plan.deletes = append(plan.deletes, t)
		} else {
			plan.missing = append(plan.missing, t)
		}
	}
	plan.local = local
	printPlan(out, plan, f.dryRun)
	if f.dryRun {
		fmt.Fprintln(out, "dry run: nothing changed")
		return nil
	}

	changelog := f.app + "-changelog"
	var changelogConfigs map[string]string
	if !plan.earliest && slices.Contains(plan.deletes, changelog) {
		// Keep the changelog's max.message.bytes, set from the
		// application's MaxRecordBytes when kstate created it.
		changelogConfigs = setoffsets.KeptConfigs(ctx, cl, changelog)
	}
	if len(plan.deletes) > 0 {
		resp, err := cl.DeleteTopics(ctx, plan.deletes...)
		if err != nil {
			return fmt.Errorf("reset: delete topics %v: %w", plan.deletes, err)
		}
		for _, r := range resp {
			if r.Err != nil && !errors.Is(r.Err, kerr.UnknownTopicOrPartition) {
				return fmt.Errorf("reset: delete topic %q: %w", r.Topic, r.Err)
			}
		}
		// Deletion is asynchronous: wait until the topics are gone, so
		// that the next run creates them anew instead of failing on a
		// topic marked for deletion.
		for {
			left, err := cl.ListTopics(ctx, plan.deletes...)
			if err == nil && gone(left) {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("reset: topics %v still exist: %w", plan.deletes, ctx.Err())
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	if plan.earliest {
		// No committed offsets and no changelog: the next run is the
		// application's first (it reads from the start, applies its
		// initial state).
		resp, err := cl.DeleteGroup(ctx, f.app)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
			return fmt.Errorf("reset: delete the committed offsets (group %q): %w", f.app, err)
		}
	} else {
		// Committed offsets need the state's input offsets in the
		// changelog, or the restore refuses the partitions (a lost
		// changelog): setoffsets.Set commits the offsets, then records
		// them in a new changelog, as kstate.SetInputOffsets does.
		// The deleted repartition topic's offsets go too: the next run's
		// restore would otherwise wait for state the new topic never had.
		// (Kafka 4.1 drops a deleted topic's offsets by itself — the
		// test passes without this — but that is the broker's cleanup,
		// not a promise.)
		rep := f.app + "-repartition"
		if ps, ok := committed[rep]; ok && len(ps) > 0 {
			set := kadm.TopicsSet{rep: {}}
			for p := range ps {
				set[rep][p] = struct{}{}
			}
			if _, err := cl.DeleteOffsets(ctx, f.app, set); err != nil {
				return fmt.Errorf("reset: delete the committed offsets of %q: %w", rep, err)
			}
		}
		t := topics[0]
		offs := map[int32]int64{}
		for _, o := range plan.offsets[t] {
			offs[int32(o[0])] = o[2]
		}
		err := setoffsets.Set(ctx, cc, adm, setoffsets.Request{
			Group: f.app, Topic: t, Offsets: offs,
			Changelog: setoffsets.ChangelogSpec(changelog, len(offs), changelogConfigs),
			TxnID:     f.app + "-reset", TxnTimeout: 10 * time.Second,
		})
		switch {
		case errors.Is(err, setoffsets.ErrNotRecorded):
			return fmt.Errorf("reset: %w; run the same reset again", err)
		case err != nil:
			return fmt.Errorf("reset: %w", err)
		}
	}
	if plan.local != "" {
		if err := checkLocalState(plan.local, f.app); err != nil {
			return err
		}
		if err := os.RemoveAll(plan.local); err != nil {
			return fmt.Errorf("reset: remove local state: %w", err)
		}
	}
	fmt.Fprintln(out, "reset done: the next run starts with empty state from the offsets above")
	return nil
}

func printPlan(w io.Writer, p resetPlan, dry bool) {
	verb := "will"
	if !dry {
		verb = "now"
	}
	state := p.state
	if state == "" {
		state = "unknown"
	}
	fmt.Fprintf(w, "reset of application %q (group %s, no members)\n", p.group, state)
	topics := make([]string, 0, len(p.offsets))
	for t := range p.offsets {
		topics = append(topics, t)
	}
	slices.Sort(topics)
	if p.earliest {
		fmt.Fprintf(w, "  delete the group's committed offsets: the next run starts as a new application, from the start of every partition (initial state applied again)\n")
	}
	for _, t := range topics {
		fmt.Fprintf(w, "  offsets of %s → %s:\n", t, p.target)
		for _, o := range p.offsets[t] {
			from := "none"
			if o[1] >= 0 {
				from = fmt.Sprint(o[1])
			}
			fmt.Fprintf(w, "    partition %d: %s → %d\n", o[0], from, o[2])
		}
	}
	for _, t := range p.deletes {
		fmt.Fprintf(w, "  delete topic %s (%s)\n", t, verb)
	}
	for _, t := range p.missing {
		fmt.Fprintf(w, "  topic %s does not exist: nothing to delete\n", t)
	}
	if p.local != "" {
		fmt.Fprintf(w, "  remove local state %s\n", p.local)
	}
}

// checkAppFlag checks an application id given by a flag: Kafka's rules
// for a topic name derived from it, and a single directory name ("." and
// ".." refused: <state-dir>/<app> must stay inside the state directory).
func checkAppFlag(flag, app string) error {
	if err := kafka.CheckApplicationID(app); err != nil {
		return usageErr("%s %q: %v", flag, app, err)
	}
	return nil
}

// checkLocalState refuses to delete a directory kstate did not create:
// one without the marker Run writes (shard.AppDirMarker), unless it holds
// nothing but the shard directories of an older release. A missing
// directory is fine (nothing to delete).
func checkLocalState(dir, app string) error {
	err := shard.CheckAppDir(dir, app)
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return fmt.Errorf("reset refused: will not remove %s: %w; kstate deletes only the state directories it created (with a %s file naming the application): check --state-dir and --app, or remove it by hand", dir, err, shard.AppDirMarker)
}

// gone reports whether none of the listed topics exists.
func gone(ds kadm.TopicDetails) bool {
	for _, d := range ds {
		if d.Err == nil {
			return false
		}
	}
	return true
}
