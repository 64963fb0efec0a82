package engine

import (
	"context"
	"io"
	"math/rand/v2"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/internal/shard"
)

// standbyBenchSource is a standby's changelog as `kstate bench scale
// throughput` writes it: one partition of 100,000 keys over 6 partitions
// (16,667 keys), every record a key's full 512-byte state, keys in random
// order (a key updated again every ~16,667 records), served in chunks of
// fresh memory the size of a 2 MiB fetch.
type standbyBenchSource struct {
	n, off int64
	keys   int
	rng    *rand.Rand
}

const (
	standbyBenchKeys  = 100_000 / 6
	standbyBenchValue = 512
	standbyBenchChunk = (2 << 20) / (standbyBenchValue + 24)
)

func (s *standbyBenchSource) Next(context.Context) ([]changelog.Record, error) {
	if s.off >= s.n {
		return nil, io.EOF
	}
	k := min(standbyBenchChunk, s.n-s.off)
	recs := make([]changelog.Record, k)
	payload := make([]byte, standbyBenchValue-3)
	for i := range recs {
		key := strconv.AppendInt(nil, int64(s.rng.IntN(s.keys)), 10)
		payload[0] = byte(s.off)
		recs[i] = changelog.Record{Key: changelogfmt.StateKey(1, key, nil),
			Value: changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, payload), Offset: s.off}
		s.off++
	}
	return recs, nil
}

// BenchmarkStandbyReplay is the standby's replay hot path: restore.Restore
// of one turn after another (StandbyTurnRecords each) into a RocksDB shard,
// 300,000 records of the bench scale changelog per op, and the shard's
// Close (its memtables flushed). "main" are the replay options before
// this change (batches of 10,000 records or 4 MiB); "standby" are
// standbyRestoreOptions (a turn in one batch of up to 16 MiB, each key's
// records coalesced). cpu-µs/record is the process's CPU time (user and
// system, RocksDB's background flushes and compactions included) per
// record replayed, the number that matters on a machine whose cores the
// active pipelines need; applied/record the share of records handed to
// ApplyChangelog (the store's batch write also keeps only each key's last
// operation: kv.sortedLast).
func BenchmarkStandbyReplay(b *testing.B) {
	const n = 300_000
	now := func() time.Time { return time.Unix(0, 0) }
	for _, bc := range []struct {
		name string
		opts func(turn int) restore.Options
	}{
		{"main", func(turn int) restore.Options {
			return restore.Options{BatchSize: min(turn, 10_000), BatchBytes: 4 << 20, Now: now}
		}},
		{"standby", func(turn int) restore.Options { return standbyRestoreOptions(turn, now) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			var applied, total int64
			var took, cpu time.Duration
			for i := range b.N {
				b.StopTimer()
				sh, err := shard.OpenShard(shard.ShardOptions{Dir: b.TempDir()})
				if err != nil {
					b.Fatal(err)
				}
				src := &standbyBenchSource{n: n, keys: standbyBenchKeys, rng: rand.New(rand.NewPCG(1, uint64(i)))}
				b.StartTimer()
				start, cpu0 := time.Now(), processCPU(b)
				for src.off < src.n {
					turn := &budgetSource{src: src, budget: defaultStandbyTurnRecords}
					st, err := restore.Restore(context.Background(), turn, sh, bc.opts(defaultStandbyTurnRecords))
					if err != nil {
						b.Fatal(err)
					}
					applied += st.Records - st.Coalesced
					total += st.Records
				}
				if sh.ChangelogOffset() != n {
					b.Fatalf("offset %d after the replay, want %d", sh.ChangelogOffset(), n)
				}
				if err := sh.Close(); err != nil {
					b.Fatal(err)
				}
				took += time.Since(start)
				cpu += processCPU(b) - cpu0
			}
			b.ReportMetric(float64(total)/took.Seconds(), "records/s")
			b.ReportMetric(float64(cpu.Microseconds())/float64(total), "cpu-µs/record")
			b.ReportMetric(float64(applied)/float64(total), "applied/record")
		})
	}
}

// budgetSource is a turn: src up to budget records, then io.EOF (as
// standbySource).
type budgetSource struct {
	src    restore.Source
	budget int
	n      int
}

func (s *budgetSource) Next(ctx context.Context) ([]changelog.Record, error) {
	if s.n >= s.budget {
		return nil, io.EOF
	}
	recs, err := s.src.Next(ctx)
	s.n += len(recs)
	return recs, err
}

// processCPU is the process's CPU time so far (user and system, every
// thread).
func processCPU(tb testing.TB) time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		tb.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
