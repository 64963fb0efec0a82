package kv_test

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// writeCompressionPhase writes 200 batches of 1,000 puts (40 MB, windows
// of the compression probe's samples) of 200-byte values under the keys
// key-<n> from n = from on: each value is n (big-endian) followed by random
// bytes, or by text that compresses. A store that writes in key order
// (kv.OrderedWriter) gets every other batch that way, as the shard's
// write-behind layer writes.
func writeCompressionPhase(t *testing.T, s kv.Store, rng *rand.Rand, from int, compressible bool) {
	t.Helper()
	const text = "value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;value;"
	for w := range 200 {
		var b kv.Batch
		for i := range 1000 {
			n := from + w*1000 + i
			v := make([]byte, 200)
			if compressible {
				copy(v, text)
			} else {
				for j := 8; j < len(v); j += 8 {
					binary.LittleEndian.PutUint64(v[j:], rng.Uint64())
				}
			}
			binary.BigEndian.PutUint64(v, uint64(n))
			b.Put(compressionKey(n), v)
		}
		var err error
		if ow, ok := s.(kv.OrderedWriter); ok && w%2 == 1 {
			err = ow.WriteOrdered(func(add func(key, value []byte, deleted bool)) {
				for _, op := range b.Ops() {
					add(op.Key, op.Value, false)
				}
			}, kv.WriteOptions{})
		} else {
			err = s.Write(&b, kv.WriteOptions{})
		}
		if err != nil {
			t.Fatal(err)
		}
	}
}

func compressionKey(n int) []byte { return fmt.Appendf(nil, "key-%09d", n) }

// checkCompressionValues reads back the values writeCompressionPhase wrote
// for the keys ns.
func checkCompressionValues(t *testing.T, s kv.Store, ns ...int) {
	t.Helper()
	for _, n := range ns {
		v, ok, err := s.Get(compressionKey(n))
		if err != nil || !ok || binary.BigEndian.Uint64(v) != uint64(n) {
			t.Fatalf("key %d: %x %v %v", n, v, ok, err)
		}
	}
}
