package kv_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// Keys are 16 random bytes and values 100 bytes, the shape of the
// DEPENDENCIES.md store micro-benchmark, so numbers compare with it.
const benchValueSize = 100

func benchKeys(n int, seed uint64) [][]byte {
	rng := rand.New(rand.NewPCG(seed, 0))
	ks := make([][]byte, n)
	for i := range ks {
		k := make([]byte, 16)
		binary.BigEndian.PutUint64(k, rng.Uint64())
		binary.BigEndian.PutUint64(k[8:], rng.Uint64())
		ks[i] = k
	}
	return ks
}

// benchBackends are the persistent backends compiled in; every benchmark
// runs once per backend (sub-benchmark backend=NAME).
func benchBackends() []kv.Backend {
	if kv.RocksDBAvailable {
		return []kv.Backend{kv.BackendRocksDB, kv.BackendPebble}
	}
	return []kv.Backend{kv.BackendPebble}
}

func forBackends(b *testing.B, f func(b *testing.B, be kv.Backend)) {
	for _, be := range benchBackends() {
		b.Run("backend="+string(be), func(b *testing.B) { f(b, be) })
	}
}

func benchStore(b *testing.B, be kv.Backend) kv.Store {
	b.Helper()
	s, err := kv.OpenBackend(be, b.TempDir(), nil, false)
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = s.Close() })
	return s
}

func preload(b *testing.B, s kv.Store, keys [][]byte) {
	b.Helper()
	value := make([]byte, benchValueSize)
	var batch kv.Batch
	for i, k := range keys {
		batch.Put(k, value)
		if batch.Len() == 10_000 || i == len(keys)-1 {
			if err := s.Write(&batch, kv.WriteOptions{DisableWAL: true}); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
}

// BenchmarkRocksWriteBatch writes batches of random keys with the WAL on
// (processing commits) and off (restore).
func BenchmarkStoreWriteBatch(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		for _, n := range []int{1_000, 10_000} {
			for _, wal := range []bool{true, false} {
				b.Run(fmt.Sprintf("ops=%d/wal=%v", n, wal), func(b *testing.B) {
					s := benchStore(b, be)
					keys := benchKeys(200_000, 1)
					value := make([]byte, benchValueSize)
					var batch kv.Batch
					b.SetBytes(int64(n * (16 + benchValueSize)))
					b.ResetTimer()
					for i := range b.N {
						batch.Reset()
						for j := range n {
							batch.Put(keys[(i*n+j)%len(keys)], value)
						}
						if err := s.Write(&batch, kv.WriteOptions{DisableWAL: !wal}); err != nil {
							b.Fatal(err)
						}
					}
					b.ReportMetric(float64(b.N*n)/b.Elapsed().Seconds(), "ops/s")
				})
			}
		}
	})
}

// BenchmarkRocksGet reads random present keys and random absent keys (the
// latter is where the bloom filter pays: a new grouping key's first read).
func BenchmarkStoreGet(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		keys := benchKeys(200_000, 2)
		preload(b, s, keys)
		absent := benchKeys(200_000, 3)
		for _, tc := range []struct {
			name string
			keys [][]byte
			want bool
		}{{"hit", keys, true}, {"miss", absent, false}} {
			b.Run(tc.name, func(b *testing.B) {
				for i := range b.N {
					_, ok, err := s.Get(tc.keys[(i*7919)%len(tc.keys)])
					if err != nil || ok != tc.want {
						b.Fatalf("Get: ok=%v err=%v", ok, err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
			})
		}
	})
}

// BenchmarkRocksIterate scans 1,000-key ranges from random start points
// (MapState iteration, timer and TTL scans) with a fresh bounded iterator.
func BenchmarkStoreIterate(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		keys := benchKeys(200_000, 4)
		preload(b, s, keys)
		const span = 1_000
		var total int
		b.ResetTimer()
		for i := range b.N {
			lower := keys[(i*7919)%len(keys)]
			it := s.NewIter(lower, nil)
			n := 0
			for ok := it.First(); ok && n < span; ok = it.Next() {
				n++
			}
			if err := it.Close(); err != nil {
				b.Fatal(err)
			}
			total += n
		}
		b.ReportMetric(float64(total)/b.Elapsed().Seconds(), "keys/s")
	})
}

// BenchmarkStoreGetHot reads 1,000 keys that stay in the memtable and block
// cache, the shape of a hot grouping key's reads: the lookup itself is cheap,
// so the per-call overhead (cgo crossings, allocations) shows.
func BenchmarkStoreGetHot(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		keys := benchKeys(1_000, 5)
		value := make([]byte, 8)
		var batch kv.Batch
		for _, k := range keys {
			batch.Put(k, value)
		}
		if err := s.Write(&batch, kv.WriteOptions{}); err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			if _, ok, err := s.Get(keys[i%len(keys)]); err != nil || !ok {
				b.Fatalf("Get: ok=%v err=%v", ok, err)
			}
		}
		b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
	})
}

// BenchmarkStoreWriteSmall writes batches of 100 puts of 8-byte values (a
// count processor's local commit per task): per-operation overhead shows.
func BenchmarkStoreWriteSmall(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		keys := benchKeys(1_000, 6)
		value := make([]byte, 8)
		var batch kv.Batch
		b.ReportAllocs()
		b.ResetTimer()
		for i := range b.N {
			batch.Reset()
			for j := range 100 {
				batch.Put(keys[(i*100+j)%len(keys)], value)
			}
			if err := s.Write(&batch, kv.WriteOptions{DisableWAL: true}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*100)/b.Elapsed().Seconds(), "ops/s")
	})
}

// BenchmarkStoreCommit writes a count processor's local commit: 2,000
// distinct keys out of 100,000 stored ones, 8-byte values, WAL on.
func BenchmarkStoreCommit(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		keys := benchKeys(100_000, 7)
		preload(b, s, keys)
		value := make([]byte, 8)
		rng := rand.New(rand.NewPCG(8, 0))
		var batch kv.Batch
		b.ReportAllocs()
		b.ResetTimer()
		for range b.N {
			batch.Reset()
			start := rng.IntN(len(keys))
			for j := range 2_000 {
				batch.Put(keys[(start+j*37)%len(keys)], value)
			}
			if err := s.Write(&batch, kv.WriteOptions{}); err != nil {
				b.Fatal(err)
			}
		}
		b.ReportMetric(float64(b.N*2_000)/b.Elapsed().Seconds(), "ops/s")
	})
}
