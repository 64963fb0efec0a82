package shard_test

import (
	"bytes"
	"fmt"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// TestPrefetchChoosesVariables checks which reads Prefetch takes ahead: a
// variable the last batch read for nearly every key, not one read for few
// keys, nothing for a batch of few keys or when the reads hit the cache,
// and values up to its byte bound (the rest are read one at a time); the
// values read are right whichever way they came.
func TestPrefetchChoosesVariables(t *testing.T) {
	if !kv.RocksDBAvailable {
		t.Skip("needs RocksDB's MultiGet")
	}
	for _, cached := range []bool{false, true} {
		t.Run(fmt.Sprint("cached=", cached), func(t *testing.T) {
			o := shard.ShardOptions{Dir: t.TempDir(), WriteBehindBytes: 1 << 20}
			if cached {
				o.Cache = shard.NewCache(64 << 20)
			}
			s, err := shard.OpenShard(o)
			noErr(t, err)
			defer s.Close()
			var all, few, big state.ValueState[[]byte]
			declare(t, s, func() {
				all = must[state.ValueState[[]byte]](t)(shard.NewValueState(s, "all", state.Bytes()))
				few = must[state.ValueState[[]byte]](t)(shard.NewValueState(s, "few", state.Bytes()))
				big = must[state.ValueState[[]byte]](t)(shard.NewValueState(s, "big", state.Bytes()))
			})
			const n = 200
			keys := make([][]byte, n)
			for i := range keys {
				keys[i] = fmt.Appendf(nil, "key-%d", n-i) // not in key order
			}
			val := func(name string, i, size int) []byte {
				return bytes.Repeat(fmt.Appendf(nil, "%s%d.", name, i), size)
			}
			var l log
			batch := func(ks [][]byte, fn func(i int)) int {
				t.Helper()
				served := shard.PrefetchServedForTest(s)
				commit(t, s, &l, 0, func() {
					noErr(t, s.Prefetch(ks))
					for i, k := range ks {
						s.SetCurrentKey(k)
						fn(i)
					}
				})
				return shard.PrefetchServedForTest(s) - served
			}
			get := func(v state.ValueState[[]byte], name string, i, size int) {
				t.Helper()
				got, ok, err := v.Get()
				noErr(t, err)
				if size < 0 {
					if ok {
						t.Fatalf("%s of key %d: %d bytes, want none", name, i, len(got))
					}
					return
				}
				if want := val(name, i, size); !ok || !bytes.Equal(got, want) {
					t.Fatalf("%s of key %d: %d bytes, %v; want %d bytes", name, i, len(got), ok, len(want))
				}
			}
			// Big values: 200 of 40 KiB, 8 MB: more than prefetchMaxBytes.
			batch(keys, func(i int) {
				noErr(t, all.Update(val("all", i, 10)))
				noErr(t, big.Update(val("big", i, 4<<10)))
				if i%10 == 0 {
					noErr(t, few.Update(val("few", i, 10)))
				}
			})
			noErr(t, s.Flush()) // the values in the store, not the write-behind layer
			read := func(i int) {
				get(all, "all", i, 10)
				if i%10 == 0 {
					get(few, "few", i, 10)
				}
			}
			// The first batch learns; the second reads ahead "all".
			if got := batch(keys, read); got != 0 {
				t.Fatalf("first batch: %d reads prefetched, want 0 (nothing learned yet)", got)
			}
			got := batch(keys, read)
			switch {
			case cached && got != 0:
				t.Fatalf("cached: %d reads prefetched, want 0 (the reads hit the cache)", got)
			case !cached && got != n:
				t.Fatalf("%d reads prefetched, want %d (the values of all, not of few)", got, n)
			}
			// Few keys: no read ahead.
			if got := batch(keys[:10], read); got != 0 {
				t.Fatalf("10 keys: %d reads prefetched, want 0", got)
			}
			// Reads of absent entries are prefetched too.
			absent := make([][]byte, n)
			for i := range absent {
				absent[i] = fmt.Appendf(nil, "absent-%d", i)
			}
			batch(absent, func(int) { get(all, "all", 0, -1) })
			if got := batch(absent, func(int) { get(all, "all", 0, -1) }); !cached && got != n {
				t.Fatalf("absent entries: %d reads prefetched, want %d", got, n)
			}
			if cached {
				return
			}
			// Big values: up to the bound.
			readBig := func(i int) { get(big, "big", i, 4<<10) }
			batch(keys, readBig)
			got = batch(keys, readBig)
			if got == 0 || got >= n {
				t.Fatalf("big values: %d of %d reads prefetched, want some but not all", got, n)
			}
		})
	}
}
