package kafka_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// TestMeasureRestore times restore.Restore of a count-like changelog (4
// partitions, 8-byte keys, 8-byte counts, written in 50,000-record
// transactions) from a real broker into fresh RocksDB stores, all
// partitions at once over one Admin, the way the engine restores. Variants,
// interleaved round by round: "old" = the previous path (8 MiB fetches,
// Next, then kafka.Record → message → changelog.Record as the root
// adapter and the engine did), "new" = NextChangelog with 2 MiB fetches
// (KSTATE_MEASURE_ALL=1 adds NextChangelog at 1 and 8 MiB), in a different
// order every round. It reports wall time and the process's CPU per
// variant. Run with KSTATE_MEASURE=1 (KSTATE_MEASURE_RECORDS per
// partition, default 200,000; KSTATE_MEASURE_ROUNDS, default 3).
func TestMeasureRestore(t *testing.T) {
	if os.Getenv("KSTATE_MEASURE") == "" {
		t.Skip("set KSTATE_MEASURE=1 to measure")
	}
	perPart := envInt("KSTATE_MEASURE_RECORDS", 200_000)
	rounds := envInt("KSTATE_MEASURE_ROUNDS", 3)
	const parts = 4
	brokers := kafkatest.Start(t, kafkatest.RequireReal()).Brokers()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Minute)
	defer cancel()
	adm, err := kafka.NewAdmin(brokers)
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	topic := fmt.Sprintf("measure-restore-%d", time.Now().UnixNano())
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: topic, Partitions: parts, ReplicationFactor: -1}); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, parts)
	for p := range int32(parts) {
		wg.Go(func() {
			for lo := 0; lo < perPart; lo += 50_000 {
				recs := make([]kafka.Record, min(50_000, perPart-lo))
				for i := range recs {
					k := uint64(p)<<40 | uint64(lo+i)
					recs[i] = kafka.Record{Topic: topic, Partition: p,
						Key:   changelogfmt.StateKey(1, binary.BigEndian.AppendUint64(nil, k*0x9e3779b97f4a7c15), nil),
						Value: changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, binary.BigEndian.AppendUint64(nil, uint64(lo+i)))}
				}
				if _, err := kafka.WriteTransaction(ctx, brokers, fmt.Sprintf("%s-w%d", topic, p), 0, recs); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	t.Logf("wrote %d records in %d partitions in %v", perPart*parts, parts, time.Since(start).Round(time.Millisecond))

	type variant struct {
		name  string
		fetch int32
		src   func(*kafka.PartitionReader) restore.Source
	}
	variants := []variant{
		{"old: 8 MiB, Next + 2 conversions", 8 << 20, func(r *kafka.PartitionReader) restore.Source { return oldSource{r} }},
		{"new: 2 MiB, NextChangelog", 2 << 20, func(r *kafka.PartitionReader) restore.Source { return newSource{r} }},
		{"NextChangelog, 1 MiB", 1 << 20, func(r *kafka.PartitionReader) restore.Source { return newSource{r} }},
		{"NextChangelog, 8 MiB", 8 << 20, func(r *kafka.PartitionReader) restore.Source { return newSource{r} }},
	}
	if os.Getenv("KSTATE_MEASURE_ALL") == "" {
		variants = variants[:2] // old against new; KSTATE_MEASURE_ALL=1 adds the other fetch sizes
	}
	walls := make([][]time.Duration, len(variants))
	cpus := make([][]time.Duration, len(variants))
	for round := range rounds {
		for i := range variants {
			vi := (i + round) % len(variants) // a different order every round
			v := variants[vi]
			undo := kafka.SetReaderFetchBytes(v.fetch)
			cpu0 := processCPU()
			t0 := time.Now()
			var wg sync.WaitGroup
			errs := make(chan error, parts)
			for p := range int32(parts) {
				wg.Go(func() {
					st, err := restoreOne(ctx, adm, topic, p, t.TempDir(), v.src)
					if err == nil && st.Records != int64(perPart) {
						err = fmt.Errorf("partition %d: restored %d records, want %d", p, st.Records, perPart)
					}
					errs <- err
				})
			}
			wg.Wait()
			wall, cpu := time.Since(t0), processCPU()-cpu0
			undo()
			close(errs)
			for err := range errs {
				if err != nil {
					t.Fatal(err)
				}
			}
			walls[vi] = append(walls[vi], wall)
			cpus[vi] = append(cpus[vi], cpu)
			t.Logf("round %d %-34s wall %v (%.0f records/s) CPU %v (%.2f µs/record) load %s", round+1, v.name,
				wall.Round(time.Millisecond), float64(perPart*parts)/wall.Seconds(), cpu.Round(time.Millisecond),
				float64(cpu.Microseconds())/float64(perPart*parts), loadavg())
		}
	}
	for vi, v := range variants {
		w, c := median(walls[vi]), median(cpus[vi])
		t.Logf("median %-34s wall %v (%.0f records/s) CPU %v (%.2f µs/record)", v.name, w.Round(time.Millisecond),
			float64(perPart*parts)/w.Seconds(), c.Round(time.Millisecond), float64(c.Microseconds())/float64(perPart*parts))
	}
}

// restoreOne restores one partition into a fresh RocksDB store in dir and
// checks a sample of keys.
func restoreOne(ctx context.Context, adm *kafka.Admin, topic string, p int32, dir string, src func(*kafka.PartitionReader) restore.Source) (restore.Stats, error) {
	s, err := kv.OpenRocksDB(dir, kv.RocksOptions{})
	if err != nil {
		return restore.Stats{}, err
	}
	defer s.Close()
	rd, err := adm.NewPartitionReader(ctx, topic, p, 0)
	if err != nil {
		return restore.Stats{}, err
	}
	defer rd.Close()
	dst := &storeTarget{s: s}
	st, err := restore.Restore(ctx, src(rd), dst, restore.Options{})
	if err != nil {
		return st, err
	}
	k := uint64(p) << 40
	v, ok, err := s.Get(changelogfmt.StateKey(1, binary.BigEndian.AppendUint64(nil, k*0x9e3779b97f4a7c15), nil))
	if err != nil || !ok || len(v) < 8 || binary.BigEndian.Uint64(v[len(v)-8:]) != 0 {
		return st, fmt.Errorf("partition %d: first key after restore: %x %v %v", p, v, ok, err)
	}
	return st, nil
}

// storeTarget applies like Shard.ApplyChangelog: a new batch per call, the
// records and the offset key, WAL-less.
type storeTarget struct {
	s   kv.Store
	off int64
}

func (t *storeTarget) ChangelogOffset() int64 { return t.off }

func (t *storeTarget) ApplyChangelog(recs []changelog.Record, next int64) error {
	var b kv.Batch
	for _, r := range recs {
		if r.Value == nil {
			b.Delete(r.Key)
		} else {
			b.Put(r.Key, r.Value)
		}
	}
	b.Put([]byte("\xffoffset"), binary.BigEndian.AppendUint64(nil, uint64(next)))
	if err := t.s.Write(&b, kv.WriteOptions{DisableWAL: true}); err != nil {
		return err
	}
	t.off = next
	return nil
}

// message mirrors engine.Message: the type the root adapter converted to.
type message struct {
	Topic     string
	Partition int32
	Offset    int64
	Key       []byte
	Value     []byte
	Timestamp time.Time
	Headers   []struct {
		Key   string
		Value []byte
	}
}

// oldSource is the path before NextChangelog: kafka.Record, then a message
// (kafkaReader.Next), then changelog.Record (the engine's changelogSource).
type oldSource struct{ rd *kafka.PartitionReader }

func (s oldSource) Next(ctx context.Context) ([]changelog.Record, error) {
	recs, err := s.rd.Next(ctx)
	if err != nil {
		return nil, err
	}
	msgs := make([]message, len(recs))
	for i, r := range recs {
		msgs[i] = message{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Key: r.Key, Value: r.Value, Timestamp: r.Timestamp}
	}
	out := make([]changelog.Record, len(msgs))
	for i, m := range msgs {
		out[i] = changelog.Record{Key: m.Key, Value: m.Value, Offset: m.Offset}
	}
	return out, nil
}

func (s oldSource) Position() int64 { return s.rd.Position() }

type newSource struct{ rd *kafka.PartitionReader }

func (s newSource) Next(ctx context.Context) ([]changelog.Record, error) {
	return s.rd.NextChangelog(ctx)
}
func (s newSource) Position() int64 { return s.rd.Position() }

func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func loadavg() string {
	b, _ := os.ReadFile("/proc/loadavg")
	if len(b) > 14 {
		b = b[:14]
	}
	return string(b)
}

func median(ds []time.Duration) time.Duration {
	s := slices.Clone(ds)
	slices.Sort(s)
	return s[len(s)/2]
}

func envInt(name string, def int) int {
	if n, err := strconv.Atoi(os.Getenv(name)); err == nil && n > 0 {
		return n
	}
	return def
}
