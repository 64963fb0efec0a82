package rescale

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/setoffsets"
)

// Options name a rescale.
type Options struct {
	From, To   string // application ids of A and B
	Partitions int    // N: B's partition count
	// InputTopic is A's input topic; empty: the one topic A's group has
	// committed offsets for.
	InputTopic string
	DryRun     bool
}

// Result is what Run found and did.
type Result struct {
	InputTopic string
	Plan       *Plan
	// Committed is A's committed offset of each of its partitions (absent:
	// none committed).
	Committed map[int32]int64
	Written   bool // false on a dry run
}

// txnTimeout is the rescale transaction's timeout: it writes the whole
// state, so far above the engine's batch transactions (the broker's
// transaction.max.timeout.ms, 15 minutes by default, bounds it).
const txnTimeout = 10 * time.Minute

// maxMisrouted bounds the examples a misrouting refusal lists.
const maxMisrouted = 5

// Run checks the preconditions, reads A's changelog, builds the plan and,
// unless opts.DryRun, writes B's changelog (one transaction over every
// partition) and then commits B's group offsets.
//
// Preconditions (each refused with ErrRefused): A's group has no members;
// B has no committed offsets and no changelog topic, or only the empty one
// (N partitions, no committed record) a failed rescale left; the input topic has
// exactly opts.Partitions partitions, more than A's changelog; and every
// input record after A's committed offsets (and every record of the new
// partitions) lies in the partition its key maps to among opts.Partitions.
func Run(ctx context.Context, cc kafka.ClientConfig, opts Options) (*Result, error) {
	if opts.From == "" || opts.To == "" || opts.From == opts.To {
		return nil, fmt.Errorf("rescale: need two different application ids, have %q and %q", opts.From, opts.To)
	}
	adm, err := cc.NewAdmin()
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	cl := adm.Kadm()
	srcLog, dstLog := opts.From+"-changelog", opts.To+"-changelog"

	// A stopped, B new.
	groups, err := cl.DescribeGroups(ctx, opts.From, opts.To)
	if err != nil {
		return nil, fmt.Errorf("rescale: describe groups: %w", err)
	}
	for _, g := range []string{opts.From, opts.To} {
		d, ok := groups[g]
		if !ok || (d.Err != nil && errors.Is(d.Err, kerr.GroupIDNotFound)) {
			continue
		}
		if d.Err != nil {
			return nil, fmt.Errorf("rescale: describe group %q: %w", g, d.Err)
		}
		if len(d.Members) > 0 {
			return nil, fmt.Errorf("%w: group %q is %s with %d member(s): stop every instance of application %q first (a stopped instance stays a static member until Options.Kafka.SessionTimeout passes, unless it ran with Options.Kafka.LeaveGroupOnShutdown)",
				ErrRefused, g, d.State, len(d.Members), g)
		}
	}
	committed, err := cl.FetchOffsets(ctx, opts.From)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("rescale: committed offsets of group %q: %w", opts.From, err)
	}
	topic := opts.InputTopic
	if topic == "" {
		var topics []string
		for t := range committed {
			topics = append(topics, t)
		}
		slices.Sort(topics)
		switch len(topics) {
		case 0:
			return nil, fmt.Errorf("%w: group %q has no committed offsets: give the input topic", ErrNoSource, opts.From)
		case 1:
			topic = topics[0]
		default:
			return nil, fmt.Errorf("rescale: group %q committed offsets of topics %v: give the input topic (the application's first, Topology.Inputs[0])", opts.From, topics)
		}
	}
	bCommitted, err := cl.FetchOffsets(ctx, opts.To)
	if err != nil && !errors.Is(err, kerr.GroupIDNotFound) {
		return nil, fmt.Errorf("rescale: committed offsets of group %q: %w", opts.To, err)
	}
	if err == nil {
		n := 0
		bCommitted.Each(func(o kadm.OffsetResponse) {
			if o.Err == nil && o.At >= 0 {
				n++
			}
		})
		if n > 0 {
			return nil, fmt.Errorf("%w: application %q already exists (its group has committed offsets): choose a new application id, or remove it first with kstate reset --app %s --input-topic %s",
				ErrRefused, opts.To, opts.To, topic)
		}
	}
	if dn, err := adm.Partitions(ctx, dstLog); err == nil {
		// A changelog without any committed record, of the right size, is
		// what a failed rescale leaves (its transaction aborted): reuse
		// it. Anything else is an existing application.
		empty := dn == opts.Partitions
		for p := range int32(dn) {
			if !empty {
				break
			}
			if empty, err = noRecords(ctx, cc, dstLog, p); err != nil {
				return nil, err
			}
		}
		if !empty {
			return nil, fmt.Errorf("%w: application %q already exists (topic %q exists): choose a new application id, or delete it first (kstate reset --app %s --input-topic %s deletes it)",
				ErrRefused, opts.To, dstLog, opts.To, topic)
		}
	} else if !errors.Is(err, kafka.ErrTopicNotFound) {
		return nil, fmt.Errorf("rescale: %w", err)
	}

	// Partition counts.
	m, err := adm.Partitions(ctx, srcLog)
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return nil, fmt.Errorf("%w: application %q has no changelog topic %q (wrong --app, or it never ran)", ErrNoSource, opts.From, srcLog)
	}
	if err != nil {
		return nil, fmt.Errorf("rescale: %w", err)
	}
	in, err := adm.Partitions(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("rescale: input topic %q: %w", topic, err)
	}
	n := opts.Partitions
	switch {
	case n <= m:
		return nil, fmt.Errorf("%w: --partitions %d: application %q has %d partitions; rescale only grows the count", ErrRefused, n, opts.From, m)
	case in != n:
		return nil, fmt.Errorf("%w: input topic %q has %d partitions, not %d: add the partitions first (kafka-topics.sh --alter --topic %s --partitions %d)",
			ErrRefused, topic, in, n, topic, n)
	}

	// B's offsets: A's commits, the partition start elsewhere. The
	// commits are read stable (a transactional commit of a crashed
	// instance still pending is waited for) before A's changelog is
	// read, so the state read matches them.
	stable, err := adm.CommittedOffsets(ctx, opts.From, topic)
	if err != nil {
		return nil, fmt.Errorf("rescale: %w", err)
	}
	starts, err := cl.ListStartOffsets(ctx, topic)
	if err == nil {
		err = starts.Error()
	}
	if err != nil {
		return nil, fmt.Errorf("rescale: start offsets of %q: %w", topic, err)
	}
	res := &Result{InputTopic: topic, Committed: map[int32]int64{}}
	offsets := make([]int64, n)
	for p := range int32(n) {
		s, _ := starts.Lookup(topic, p)
		offsets[p] = s.Offset
		if p >= int32(m) {
			continue
		}
		if o, ok := stable[p]; ok {
			res.Committed[p] = o
			offsets[p] = o
		}
	}

	// Unprocessed input must already be where its key's state goes.
	if err := checkRouting(ctx, cc, topic, offsets); err != nil {
		return nil, err
	}

	// A's state, spilled to a temporary store (under $TMPDIR, removed
	// afterwards): a rescale's memory does not grow with the state's size.
	store, err := OpenStore("")
	if err != nil {
		return nil, err
	}
	defer store.Close()
	for p := range int32(m) {
		if err := loadPartition(ctx, cc, store, srcLog, p); err != nil {
			return nil, err
		}
	}
	plan, err := store.Build(n, offsets)
	if err != nil {
		return nil, err
	}
	res.Plan = plan
	if opts.DryRun {
		return res, nil
	}

	// Write B: the changelog (one transaction), then the offsets. A
	// failure in between leaves a changelog without offsets: the next
	// rescale refuses (B exists) until it is deleted.
	// B's changelog keeps A's max.message.bytes, as a reset keeps it.
	spec := setoffsets.ChangelogSpec(dstLog, n, setoffsets.KeptConfigs(ctx, cl, srcLog))
	if err := adm.EnsureTopic(ctx, spec); err != nil {
		return nil, fmt.Errorf("rescale: create %q: %w", dstLog, err)
	}
	// Streamed from the store: at most a few thousand records are in
	// flight at once. A store failure cancels wctx, which aborts the
	// transaction.
	wctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var serr error
	recs := func(yield func(kafka.Record) bool) {
		for _, pp := range plan.Partitions {
			more := true
			serr = store.Each(pp.Partition, func(e Entry) bool {
				more = yield(kafka.Record{Topic: dstLog, Partition: pp.Partition, Key: e.Key, Value: e.Value})
				return more
			})
			if serr != nil {
				cancel()
				return
			}
			if !more {
				return
			}
		}
	}
	_, err = cc.WriteTransactionSeq(wctx, opts.To+"-rescale", txnTimeout, recs)
	if serr != nil {
		err = serr
	}
	if err != nil {
		// Nothing of it is visible (the transaction aborted). The topic
		// stays: deleting it right after the abort can leave the abort's
		// markers undeliverable and the next producer with this
		// transactional id waiting; a rerun accepts a changelog of B
		// with no committed record.
		return nil, fmt.Errorf("rescale: write %q failed (nothing committed): run the rescale again: %w", dstLog, err)
	}
	offs := make(map[int32]int64, n)
	for p, o := range offsets {
		offs[int32(p)] = o
	}
	if err := adm.CommitGroupOffsets(ctx, opts.To, topic, offs); err != nil {
		return nil, fmt.Errorf("rescale: %q is written but group %q's offsets are not committed (B refuses to run): delete the topic (kafka-topics.sh --delete --topic %s) and run the rescale again: %w", dstLog, opts.To, dstLog, err)
	}
	res.Written = true
	return res, nil
}

// loadPartition reads one changelog partition into store (the
// compaction view: records without a key, or whose key starts with 0xff,
// outside the changelog's key spaces, are skipped, as kafka's ReadView
// does).
func loadPartition(ctx context.Context, cc kafka.ClientConfig, store *Store, topic string, p int32) error {
	store.AddPartition(p)
	r, err := cc.NewPartitionReader(ctx, topic, p, 0)
	if err != nil {
		return fmt.Errorf("rescale: %w", err)
	}
	defer r.Close()
	for {
		recs, err := r.Next(ctx)
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("rescale: read %s partition %d: %w", topic, p, err)
		}
		for _, rec := range recs {
			if len(rec.Key) == 0 || rec.Key[0] == 0xff {
				continue
			}
			if err := store.Put(p, rec.Key, rec.Value); err != nil {
				return err
			}
		}
	}
}

// checkRouting reads every input partition from offsets[p] to its last
// stable offset and refuses a keyed record whose key maps elsewhere among
// len(offsets) partitions (records without a key touch no state).
func checkRouting(ctx context.Context, cc kafka.ClientConfig, topic string, offsets []int64) error {
	n := len(offsets)
	var bad []string
	count := 0
	for p, from := range offsets {
		r, err := cc.NewPartitionReader(ctx, topic, int32(p), from)
		if err != nil {
			return fmt.Errorf("rescale: %w", err)
		}
		for {
			recs, err := r.Next(ctx)
			if err == io.EOF {
				break
			}
			if err != nil {
				r.Close()
				return fmt.Errorf("rescale: read %s partition %d: %w", topic, p, err)
			}
			for _, rec := range recs {
				if rec.Key == nil {
					continue
				}
				if want := murmur2.Partition(rec.Key, n); want != int32(p) {
					count++
					if len(bad) < maxMisrouted {
						bad = append(bad, fmt.Sprintf("partition %d offset %d key %q (maps to %d)", p, rec.Offset, rec.Key, want))
					}
				}
			}
		}
		r.Close()
	}
	if count > 0 {
		return fmt.Errorf("%w: %d unprocessed input record(s) of %q are in a partition their key does not map to among %d partitions (%s): "+
			"they would be processed by a partition that does not hold their key's state; run the application until it has processed its input "+
			"(stop producing, or produce only after the rescale) and rescale again",
			ErrRefused, count, topic, n, strings.Join(bad, "; "))
	}
	return nil
}

// noRecords reports whether a partition holds no committed record.
func noRecords(ctx context.Context, cc kafka.ClientConfig, topic string, p int32) (bool, error) {
	r, err := cc.NewPartitionReader(ctx, topic, p, 0)
	if err != nil {
		return false, fmt.Errorf("rescale: %w", err)
	}
	defer r.Close()
	_, err = r.Next(ctx)
	if err == io.EOF {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("rescale: read %s partition %d: %w", topic, p, err)
	}
	return false, nil
}
