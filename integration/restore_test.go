package integration

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"path/filepath"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// readerSource adapts a kafka.PartitionReader to a restore.Source.
type readerSource struct{ r *kafka.PartitionReader }

func (s readerSource) Next(ctx context.Context) ([]changelog.Record, error) {
	recs, err := s.r.Next(ctx)
	out := make([]changelog.Record, len(recs))
	for i, r := range recs {
		out[i] = changelog.Record{Key: r.Key, Value: r.Value, Offset: r.Offset}
	}
	return out, err
}

func (s readerSource) Position() int64 { return s.r.Position() }

// shardVars are the variables the test drives on a shard.
type shardVars struct {
	count  state.ValueState[int64]
	events state.ListState[string]
	seen   state.MapState[string, int64]
	recent state.ValueState[string] // with TTL
	timers *timers.Timers
}

func declare(t *testing.T, sh *shard.Shard) shardVars {
	t.Helper()
	sh.SetDeclaring(true)
	defer sh.SetDeclaring(false)
	var v shardVars
	var err error
	if v.count, err = shard.NewValueState(sh, "count", state.Int64()); err != nil {
		t.Fatal(err)
	}
	if v.events, err = shard.NewListState(sh, "events", state.String()); err != nil {
		t.Fatal(err)
	}
	if v.seen, err = shard.NewMapState(sh, "seen", state.String(), state.Int64()); err != nil {
		t.Fatal(err)
	}
	if v.recent, err = shard.NewValueState(sh, "recent", state.String(), state.WithTTL(3*time.Second)); err != nil {
		t.Fatal(err)
	}
	v.timers = timers.New(sh)
	return v
}

// dumpShard returns every changelogged key/value of a shard (the local
// offset key 0xFF is outside every key space and is excluded).
func dumpShard(t *testing.T, sh *shard.Shard) map[string]string {
	t.Helper()
	sh.Begin(-1)
	defer sh.Abort()
	out := map[string]string{}
	if err := sh.Scan(nil, []byte{0xff}, func(k, v []byte) bool {
		out[string(k)] = string(v)
		return true
	}); err != nil {
		t.Fatal(err)
	}
	return out
}

// TestChangelogRestoreRealBroker writes a shard's changelog through real Kafka
// transactions — some committed, some aborted after their records reached the
// log — then restores a fresh RocksDB shard read_committed and requires it to
// equal the source shard exactly (committed batches only), including a
// restart that restores only the tail.
func TestChangelogRestoreRealBroker(t *testing.T) {
	t.Parallel()
	brokers := realKafka(t).Brokers()
	adm := newAdmin(t, brokers)
	topic := uniqueName(t, "changelog")
	compact := "compact"
	createTopic(t, adm, topic, 1, map[string]*string{"cleanup.policy": &compact})

	prod, err := kgo.NewClient(kgo.SeedBrokers(brokers...), kgo.TransactionalID(topic+"-tx"),
		kgo.DefaultProduceTopic(topic), kgo.TransactionTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	defer prod.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	src, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), AllowTTL: true})
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	v := declare(t, src)

	rng := rand.New(rand.NewPCG(42, 7))
	keys := []string{"alice", "bob", "carol", "dave", "eve"}
	now := int64(1_000_000)
	var committed, aborted int
	runBatches := func(n int) {
		for b := 0; b < n; b++ {
			now += int64(rng.IntN(2000))
			src.Begin(now)
			for op := 0; op < 20; op++ {
				k := keys[rng.IntN(len(keys))]
				src.SetCurrentKey([]byte(k))
				var err error
				switch rng.IntN(8) {
				case 0, 1:
					c, _, _ := v.count.Get()
					err = v.count.Update(c + 1)
				case 2:
					err = v.events.AppendValue(fmt.Sprintf("e%d", rng.IntN(100)))
				case 3:
					err = v.seen.UpdateValue(fmt.Sprintf("u%d", rng.IntN(6)), rng.Int64N(1000))
				case 4:
					err = v.seen.RemoveKey(fmt.Sprintf("u%d", rng.IntN(6)))
				case 5:
					err = v.recent.Update(fmt.Sprintf("r%d", op))
				case 6:
					err = v.timers.Register([]byte(k), now+rng.Int64N(5000))
				case 7:
					if rng.IntN(4) == 0 {
						err = v.events.Clear()
					} else {
						err = v.count.Clear()
					}
				}
				if err != nil {
					t.Fatalf("batch %d op %d: %v", b, op, err)
				}
			}
			recs, err := src.Finish()
			if err != nil {
				t.Fatal(err)
			}
			if err := prod.BeginTransaction(); err != nil {
				t.Fatal(err)
			}
			var last int64 = -1
			for _, r := range recs {
				rec := &kgo.Record{Key: r.Key, Value: r.Value}
				res := prod.ProduceSync(ctx, rec)
				if err := res.FirstErr(); err != nil {
					t.Fatal(err)
				}
				last = rec.Offset
			}
			commit := rng.IntN(4) != 0 || b == n-1 // always end on a commit marker
			if err := prod.EndTransaction(ctx, kgo.TransactionEndTry(commit)); err != nil {
				t.Fatal(err)
			}
			if commit {
				committed++
				if err := src.Commit(last + 1); err != nil {
					t.Fatal(err)
				}
			} else {
				aborted++
				src.Abort()
			}
		}
	}
	runBatches(40)
	// End on an aborted transaction too: its records and marker are the log's tail.
	src.Begin(now)
	src.SetCurrentKey([]byte("zed"))
	if err := v.count.Update(999); err != nil {
		t.Fatal(err)
	}
	recs, _ := src.Finish()
	_ = prod.BeginTransaction()
	for _, r := range recs {
		if err := prod.ProduceSync(ctx, &kgo.Record{Key: r.Key, Value: r.Value}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	if err := prod.EndTransaction(ctx, kgo.TryAbort); err != nil {
		t.Fatal(err)
	}
	src.Abort()
	aborted++

	restore := func(dir string) (*shard.Shard, restore.Stats) {
		t.Helper()
		dst, err := shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true})
		if err != nil {
			t.Fatal(err)
		}
		r, err := kafka.NewPartitionReader(ctx, brokers, topic, 0, dst.ChangelogOffset())
		if err != nil {
			t.Fatal(err)
		}
		defer r.Close()
		st, err := restore.Restore(ctx, readerSource{r}, dst, restore.Options{BatchSize: 97, Logger: testlog.New(t)})
		if err != nil && !errors.Is(err, io.EOF) {
			t.Fatal(err)
		}
		return dst, st
	}

	dir := filepath.Join(t.TempDir(), "shard")
	dst, st := restore(dir)
	want, got := dumpShard(t, src), dumpShard(t, dst)
	compareDumps(t, want, got)
	t.Logf("restored %d records (offsets %d..%d) from %d committed and %d aborted transactions; %d shard keys equal",
		st.Records, st.FromOffset, st.ToOffset, committed, aborted, len(got))
	if st.Records == 0 || committed == 0 || aborted < 2 {
		t.Fatalf("test did not exercise enough: records=%d committed=%d aborted=%d", st.Records, committed, aborted)
	}
	// Typed reads on the restored shard agree with the source too.
	dv := declare(t, dst)
	src.Begin(now)
	dst.Begin(now)
	for _, k := range append(keys, "zed") {
		src.SetCurrentKey([]byte(k))
		dst.SetCurrentKey([]byte(k))
		a, aok, _ := v.count.Get()
		b, bok, _ := dv.count.Get()
		if a != b || aok != bok {
			t.Fatalf("key %s: count %d/%v restored as %d/%v", k, a, aok, b, bok)
		}
	}
	src.Abort()
	dst.Abort()
	offsetAfterFull := dst.ChangelogOffset()
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}

	// More batches, then reopen the restored shard: only the tail is read.
	runBatches(10)
	dst, st = restore(dir)
	defer dst.Close()
	if st.FromOffset != offsetAfterFull {
		t.Fatalf("tail restore started at %d, want the stored offset %d", st.FromOffset, offsetAfterFull)
	}
	compareDumps(t, dumpShard(t, src), dumpShard(t, dst))
	t.Logf("tail restore: %d records from offset %d", st.Records, st.FromOffset)
}

func compareDumps(t *testing.T, want, got map[string]string) {
	t.Helper()
	for k, wv := range want {
		if gv, ok := got[k]; !ok || gv != wv {
			t.Fatalf("key %x: restored %x (present=%v), want %x", k, gv, ok, wv)
		}
	}
	for k, gv := range got {
		if _, ok := want[k]; !ok {
			t.Fatalf("restored shard has extra key %x = %x (from an aborted transaction?)", k, gv)
		}
	}
	if len(want) == 0 {
		t.Fatal("empty shard: nothing compared")
	}
}
