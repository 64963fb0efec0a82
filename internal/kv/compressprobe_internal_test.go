package kv

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"testing"
)

// The probe turns compression off after a window of values that deflate
// does not shrink by probeOffBelow, unless they are small, and on again
// after a window it shrinks by more than probeOnAbove.
func TestCompressProbe(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	random := func(n int) []byte {
		v := make([]byte, n+8)
		for i := 0; i < n; i += 8 {
			binary.LittleEndian.PutUint64(v[i:], rng.Uint64())
		}
		return v[:n]
	}
	// Compressible values, from a pool (formatting each is slow under
	// -race): 4099 of them, so that the samples, one value in about 128,
	// cycle through all of them.
	var pool [][]byte
	for i := range 4099 {
		v := fmt.Appendf(nil, "user-%08d,status=active,region=eu-west-1,", i)
		for len(v) < 5000 {
			v = append(v, v...)
		}
		pool = append(pool, v[:5000])
	}
	text := func(i, n int) []byte { return pool[i%len(pool)][:n] }
	p := newCompressProbe()
	// feed offers about windows windows of sampled bytes of values from
	// gen, and returns the verdicts that changed.
	feed := func(windows int, gen func(i int) []byte) (changes []bool) {
		for i, in := 0, 0; in < windows*probeWindow*probeStride; i++ {
			v := gen(i)
			p.add(v)
			in += len(v)
			if on, changed := p.verdict(); changed {
				changes = append(changes, on)
			}
		}
		return changes
	}
	if c := feed(3, func(i int) []byte { return text(i, 200) }); len(c) != 0 || !p.on {
		t.Fatalf("compressible values: verdict changes %v, on %v; want none, on", c, p.on)
	}
	if c := feed(3, func(int) []byte { return random(24) }); len(c) != 0 || !p.on {
		t.Fatalf("small random values: verdict changes %v, on %v; want none, on (their blocks are mostly keys)", c, p.on)
	}
	if c := feed(3, func(int) []byte { return random(200) }); len(c) != 1 || c[0] || p.on {
		t.Fatalf("random values: verdict changes %v, on %v; want one to off", c, p.on)
	}
	// Large values, and a mix: a random half of each value still saves
	// more than a fifth.
	if c := feed(3, func(i int) []byte { return append(random(3000), text(i, 5000)...) }); len(c) != 1 || !c[0] || !p.on {
		t.Fatalf("half-compressible large values: verdict changes %v, on %v; want one to on", c, p.on)
	}
	if c := feed(2, func(int) []byte { return random(20_000) }); len(c) != 1 || c[0] {
		t.Fatalf("random large values: verdict changes %v; want one to off", c)
	}
}
