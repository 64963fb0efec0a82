// Command rssbench measures the peak resident memory (VmHWM) of the count
// workload's state on RocksDB shards, without Kafka: one store per
// partition, one goroutine per partition doing the count processor's
// read-modify-write (Get the key's int64 count, Put count+1) in batches,
// as the partition tasks do. The Kafka client, the broker and the batch
// machinery are left out so that the number is the state's memory plus a
// small constant (the Go runtime). See docs/BENCHMARKS.md, "Memory", and
// docs/benchmarks/history.md, "State memory (Options.State.Memory)".
//
//	go run ./internal/tools/rssbench -partitions 96 -state-memory -1
package main

import (
	"bufio"
	"encoding/binary"
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kstate/kstate/internal/kv"
)

func main() {
	partitions := flag.Int("partitions", 4, "shards (input partitions), one goroutine each")
	keys := flag.Int("keys", 4_000_000, "distinct keys, spread evenly over the partitions")
	records := flag.Int("records", 6_000_000, "input rows in total, keys uniform at random")
	batch := flag.Int("batch", 1000, "rows per partition per write batch")
	valueBytes := flag.Int("value-bytes", 8, "bytes of each stored value (the count, padded): larger values make the state outgrow the memory bounds sooner")
	stateMemory := flag.Int64("state-memory", 256<<20, "bytes of the shared budget (kstate.Options.State.Memory); negative: a 64 MiB cache and a 32 MiB memtable per shard (before the budget)")
	flag.Parse()
	if err := run(*partitions, *keys, *records, *batch, max(*valueBytes, 8), *stateMemory); err != nil {
		fmt.Fprintln(os.Stderr, "rssbench:", err)
		os.Exit(1)
	}
}

func run(partitions, keys, records, batch, valueBytes int, stateMemory int64) error {
	dir, err := os.MkdirTemp("", "kstate-rssbench-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	var mem *kv.SharedMemory
	if stateMemory > 0 {
		if mem, err = kv.NewSharedMemory(stateMemory); err != nil {
			return err
		}
		defer mem.Close()
	}
	stores := make([]kv.Store, partitions)
	for p := range stores {
		if stores[p], err = kv.OpenRocksDB(filepath.Join(dir, strconv.Itoa(p)), kv.RocksOptions{Memory: mem}); err != nil {
			return err
		}
	}
	t0 := time.Now()
	errs := make([]error, partitions)
	var wg sync.WaitGroup
	for p, s := range stores {
		wg.Go(func() { errs[p] = countWorkload(s, p, partitions, keys, records/partitions, batch, valueBytes) })
	}
	wg.Wait()
	elapsed := time.Since(t0)
	var memUsage, memtables int64
	if mem != nil {
		memUsage, memtables = mem.Usage(), mem.MemtableUsage()
	}
	for p, s := range stores {
		if err := s.Close(); err != nil && errs[p] == nil {
			errs[p] = err
		}
	}
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	fmt.Printf("partitions=%d keys=%d records=%d value-bytes=%d state-memory=%d: peak RSS %d MiB, %.0f rows/s, shared cache usage at end %d MiB (memtables %d MiB)\n",
		partitions, keys, records, valueBytes, stateMemory, peakRSS()>>20, float64(records)/elapsed.Seconds(), memUsage>>20, memtables>>20)
	return nil
}

// countWorkload is partition p's share: keys k with k%partitions == p.
func countWorkload(s kv.Store, p, partitions, keys, rows, batch, valueBytes int) error {
	rng := rand.New(rand.NewPCG(uint64(p), 1))
	own := max(keys/partitions, 1)
	var b kv.Batch
	for done := 0; done < rows; {
		b = kv.Batch{}
		n := min(batch, rows-done)
		counts := make(map[string]int64, n) // rows of one key in a batch write once
		for range n {
			k := fmt.Sprintf("key-%09d", rng.IntN(own)*partitions+p)
			c, ok := counts[k]
			if !ok {
				v, found, err := s.Get([]byte(k))
				if err != nil {
					return err
				}
				if found {
					c = int64(binary.BigEndian.Uint64(v))
				}
			}
			counts[k] = c + 1
		}
		for k, c := range counts {
			v := make([]byte, valueBytes)
			binary.BigEndian.PutUint64(v, uint64(c))
			b.Put([]byte(k), v)
		}
		if err := s.Write(&b, kv.WriteOptions{}); err != nil {
			return err
		}
		done += n
	}
	return nil
}

// peakRSS is VmHWM from /proc/self/status in bytes, 0 without /proc.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return kb << 10
		}
	}
	return 0
}
