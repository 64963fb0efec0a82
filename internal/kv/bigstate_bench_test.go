package kv_test

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kv"
)

// BenchmarkStoreGetLarge is the point read of the big workload
// (docs/BENCHMARKS.md, "State larger than memory") on one shard: 800k keys
// of 200 random bytes (~170 MB, more than the 32 MiB default block cache),
// read at random: keys present (hit) and absent (miss, a new grouping key,
// where the bloom filter answers).
func BenchmarkStoreGetLarge(b *testing.B) {
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		rng := fillLarge(b, s)
		for _, tc := range []struct {
			name string
			odd  int
		}{{"hit", 0}, {"miss", 1}} {
			b.Run(tc.name, func(b *testing.B) {
				cpu0 := cpuTime()
				for range b.N {
					_, ok, err := s.Get(largeKey(2*rng.IntN(largeKeys) + tc.odd))
					if err != nil || ok != (tc.odd == 0) {
						b.Fatalf("Get: ok=%v err=%v", ok, err)
					}
				}
				b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "gets/s")
				b.ReportMetric(float64(cpuTime()-cpu0)/float64(b.N), "cpu-ns/op")
			})
		}
	})
}

// cpuTime is the process's user and system CPU time, all threads (the
// store's background threads too): on a loaded machine, the cost per
// operation that wall time hides.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// The large store of the point-read benchmarks: largeKeys even keys
// (largeKey(2i)) of largeValueBytes random bytes each, the odd keys absent.
const largeKeys, largeValueBytes = 800_000, 200

func largeKey(i int) []byte { return fmt.Appendf(nil, "k%07d", i) }

// fillLarge writes the large store to s and returns the random source the
// benchmark goes on with.
func fillLarge(b *testing.B, s kv.Store) *rand.Rand {
	b.Helper()
	rng := rand.New(rand.NewPCG(4, 0))
	var batch kv.Batch
	for i := range largeKeys {
		value := make([]byte, largeValueBytes) // the batch keeps it until the write
		for j := range value {
			value[j] = byte(rng.Uint32())
		}
		batch.Put(largeKey(2*i), value)
		if batch.Len() == 10_000 || i == largeKeys-1 {
			if err := s.Write(&batch, kv.WriteOptions{DisableWAL: true}); err != nil {
				b.Fatal(err)
			}
			batch.Reset()
		}
	}
	return rng
}

// BenchmarkStoreGetSortedLarge reads the store of BenchmarkStoreGetLarge
// in sorted groups of 2,500 random keys (a batch's keys of one shard) with
// MultiGetter, against a Get each: CPU per key, on each backend, for keys
// present (hit) and absent (miss).
func BenchmarkStoreGetSortedLarge(b *testing.B) {
	const group = 2_500
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		rng := fillLarge(b, s)
		mg := s.(kv.MultiGetter)
		// sample returns a group of sorted distinct keys: present ones
		// (odd 0) or absent ones (odd 1).
		sample := func(odd int) [][]byte {
			idx := make([]int, group)
			for i := range idx {
				idx[i] = 2*rng.IntN(largeKeys) + odd
			}
			slices.Sort(idx)
			idx = slices.Compact(idx)
			ks := make([][]byte, len(idx))
			for i, x := range idx {
				ks[i] = largeKey(x)
			}
			return ks
		}
		// perKey runs read over a new sample each iteration and reports its
		// CPU per key.
		perKey := func(name string, odd int, read func(b *testing.B, ks [][]byte)) {
			b.Run(name, func(b *testing.B) {
				var cpu time.Duration
				n := 0
				for range b.N {
					ks := sample(odd)
					cpu0 := cpuTime()
					read(b, ks)
					cpu += cpuTime() - cpu0
					n += len(ks)
				}
				b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/key")
			})
		}
		for round := range 3 {
			for odd, name := range []string{"hit", "miss"} {
				present := odd == 0
				perKey(fmt.Sprintf("get-%s/%d", name, round), odd, func(b *testing.B, ks [][]byte) {
					for _, k := range ks {
						if _, ok, err := s.Get(k); err != nil || ok != present {
							b.Fatalf("Get: ok=%v err=%v", ok, err)
						}
					}
				})
				perKey(fmt.Sprintf("sorted-%s/%d", name, round), odd, func(b *testing.B, ks [][]byte) {
					err := mg.GetSorted(ks, 1<<30, func(i int, v []byte, ok bool) {
						if ok != present || ok && len(v) != largeValueBytes {
							b.Fatalf("GetSorted: key %d ok=%v len %d", i, ok, len(v))
						}
					})
					if err != nil {
						b.Fatal(err)
					}
				})
			}
		}
	})
}
