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
	const keys, valueBytes = 800_000, 200
	key := func(i int) []byte { return fmt.Appendf(nil, "k%07d", i) }
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		rng := rand.New(rand.NewPCG(4, 0))
		var batch kv.Batch
		for i := range keys {
			value := make([]byte, valueBytes) // the batch keeps it until the write
			for j := range value {
				value[j] = byte(rng.Uint32())
			}
			batch.Put(key(2*i), value) // even keys present, odd absent
			if batch.Len() == 10_000 || i == keys-1 {
				if err := s.Write(&batch, kv.WriteOptions{DisableWAL: true}); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		for _, tc := range []struct {
			name string
			odd  int
		}{{"hit", 0}, {"miss", 1}} {
			b.Run(tc.name, func(b *testing.B) {
				cpu0 := cpuTime()
				for range b.N {
					_, ok, err := s.Get(key(2*rng.IntN(keys) + tc.odd))
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

// BenchmarkStoreGetSortedLarge reads the store of BenchmarkStoreGetLarge
// in sorted groups of 2,500 random keys (a batch's keys of one shard) with
// MultiGetter, against a Get each: CPU per key, on each backend, for keys
// present (hit) and absent (miss).
func BenchmarkStoreGetSortedLarge(b *testing.B) {
	const keys, valueBytes, group = 800_000, 200, 2_500
	key := func(i int) []byte { return fmt.Appendf(nil, "k%07d", i) }
	forBackends(b, func(b *testing.B, be kv.Backend) {
		s := benchStore(b, be)
		rng := rand.New(rand.NewPCG(4, 0))
		var batch kv.Batch
		for i := range keys {
			value := make([]byte, valueBytes)
			for j := range value {
				value[j] = byte(rng.Uint32())
			}
			batch.Put(key(2*i), value)
			if batch.Len() == 10_000 || i == keys-1 {
				if err := s.Write(&batch, kv.WriteOptions{DisableWAL: true}); err != nil {
					b.Fatal(err)
				}
				batch.Reset()
			}
		}
		mg := s.(kv.MultiGetter)
		odd := 0 // 1: absent keys
		sample := func() [][]byte {
			idx := make([]int, group)
			for i := range idx {
				idx[i] = 2*rng.IntN(keys) + odd
			}
			slices.Sort(idx)
			idx = slices.Compact(idx)
			ks := make([][]byte, len(idx))
			for i, x := range idx {
				ks[i] = key(x)
			}
			return ks
		}
		// perKey runs read over a new sample each iteration and reports its
		// CPU per key.
		perKey := func(name string, read func(b *testing.B, ks [][]byte)) {
			b.Run(name, func(b *testing.B) {
				var cpu time.Duration
				n := 0
				for range b.N {
					ks := sample()
					cpu0 := cpuTime()
					read(b, ks)
					cpu += cpuTime() - cpu0
					n += len(ks)
				}
				b.ReportMetric(float64(cpu)/float64(n), "cpu-ns/key")
			})
		}
		for round := range 3 {
			for _, miss := range []int{0, 1} {
				name := map[int]string{0: "hit", 1: "miss"}[miss]
				odd = miss
				perKey(fmt.Sprintf("get-%s/%d", name, round), func(b *testing.B, ks [][]byte) {
					for _, k := range ks {
						if _, ok, err := s.Get(k); err != nil || ok != (miss == 0) {
							b.Fatalf("Get: ok=%v err=%v", ok, err)
						}
					}
				})
				perKey(fmt.Sprintf("sorted-%s/%d", name, round), func(b *testing.B, ks [][]byte) {
					err := mg.GetSorted(ks, 1<<30, func(i int, v []byte, ok bool) {
						if ok != (miss == 0) || ok && len(v) != valueBytes {
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
