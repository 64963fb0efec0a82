package restore_test

import (
	"context"
	"encoding/binary"
	"io"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
)

// rocksTarget is a Target on a bare RocksDB store, the way the shard
// applies the changelog: one WAL-less batch per call holding the records
// and the local offset key (outside every changelogged key space).
type rocksTarget struct {
	s   kv.Store
	off int64
	b   kv.Batch
}

var offsetKey = []byte("\xffoffset")

func openRocksTarget(tb testing.TB, dir string) *rocksTarget {
	tb.Helper()
	s, err := kv.OpenRocksDB(dir, kv.RocksOptions{InsertHints: true}) // as a shard opens its store (kv.OpenBackend)
	if err != nil {
		tb.Fatal(err)
	}
	t := &rocksTarget{s: s}
	if v, ok, err := s.Get(offsetKey); err != nil {
		tb.Fatal(err)
	} else if ok {
		t.off = int64(binary.BigEndian.Uint64(v))
	}
	return t
}

func (t *rocksTarget) ChangelogOffset() int64 { return t.off }

func (t *rocksTarget) ApplyChangelog(recs []changelog.Record, next int64) error {
	t.b.Reset()
	for _, r := range recs {
		if r.Tombstone() {
			t.b.Delete(r.Key)
		} else {
			t.b.Put(r.Key, r.Value)
		}
	}
	t.b.Put(offsetKey, binary.BigEndian.AppendUint64(nil, uint64(next)))
	if err := t.s.Write(&t.b, kv.WriteOptions{DisableWAL: true}); err != nil {
		return err
	}
	t.off = next
	return nil
}

// genSource produces n records of 100-byte values (header + payload) under
// distinct state keys in random order, in fetch-sized chunks of freshly
// allocated memory, as a Kafka client delivers them.
type genSource struct {
	n, off, chunk int64
}

const benchValueLen = 100

func mix(x uint64) uint64 { // splitmix64 finaliser: a bijection, so keys stay distinct
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

func benchKey(i int64) []byte {
	return changelogfmt.StateKey(1, binary.BigEndian.AppendUint64(nil, mix(uint64(i))), nil)
}

func (g *genSource) Next(context.Context) ([]changelog.Record, error) {
	if g.off >= g.n {
		return nil, io.EOF
	}
	k := min(g.chunk, g.n-g.off)
	recs := make([]changelog.Record, k)
	payload := make([]byte, benchValueLen-3) // 3 header bytes: version, flags, schema id
	for i := range recs {
		payload[0] = byte(g.off)
		recs[i] = changelog.Record{
			Key:    benchKey(g.off),
			Value:  changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, payload),
			Offset: g.off,
		}
		g.off++
	}
	return recs, nil
}

// BenchmarkRestore restores 1M records into a fresh RocksDB shard.
// "records/s" covers Restore alone; "durable-records/s" adds the memtable
// flush that makes the WAL-less writes durable (done at Close here, at the
// first logged commit in the engine).
func BenchmarkRestore(b *testing.B) {
	const n = 1_000_000
	for range b.N {
		b.StopTimer()
		dir := b.TempDir()
		dst := openRocksTarget(b, dir)
		src := &genSource{n: n, chunk: 5_000}
		b.StartTimer()
		start := time.Now()
		st, err := restore.Restore(context.Background(), src, dst, restore.Options{})
		if err != nil {
			b.Fatal(err)
		}
		restored := time.Since(start)
		if err := dst.s.Close(); err != nil {
			b.Fatal(err)
		}
		durable := time.Since(start)
		b.StopTimer()
		if st.Records != n || st.ToOffset != n {
			b.Fatalf("stats %+v", st)
		}
		// Reopen: the offset and sampled records must have survived Close.
		check := openRocksTarget(b, dir)
		if check.off != n {
			b.Fatalf("offset after reopen %d, want %d", check.off, n)
		}
		for _, i := range []int64{0, n / 2, n - 1} {
			if _, ok, err := check.s.Get(benchKey(i)); err != nil || !ok {
				b.Fatalf("record %d missing after reopen (err %v)", i, err)
			}
		}
		_ = check.s.Close()
		b.ReportMetric(float64(n)/restored.Seconds(), "records/s")
		b.ReportMetric(float64(n)/durable.Seconds(), "durable-records/s")
		b.StartTimer()
	}
}
