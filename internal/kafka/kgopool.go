package kafka

import (
	"math/bits"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// kgoPool keeps the kgo.Record arrays of finished produce calls for the next
// calls. A record array lives from the produce call to its last promise,
// and a heavy batch's arrays were a fifth of all the bytes the process
// allocated (docs/BENCHMARKS.md, "Packed lists and maps"): reused, they
// cost no allocation, no zeroing of new memory and no garbage. franz-go
// reads a record only until its promise runs (it takes the record's size
// before calling it), so an array whose every promise ran is free.
//
// Safe for concurrent use: arrays come back on franz-go's goroutines.
type kgoPool struct {
	mu    sync.Mutex
	free  [][]kgo.Record
	total int // capacity of the arrays in free
}

// maxPooledKgo bounds the capacity of the pooled arrays together (about
// 11 MiB of kgo.Records): a few of the largest batches' produce calls.
const maxPooledKgo = 1 << 16

// kgoClass rounds n up to a power of two (at least 64), so that an array
// serves the next calls of about its size.
func kgoClass(n int) int {
	if n <= 64 {
		return 64
	}
	return 1 << bits.Len(uint(n-1))
}

// get returns an array of n zero records: the smallest pooled one that
// holds n, else a new one.
func (p *kgoPool) get(n int) []kgo.Record {
	p.mu.Lock()
	best := -1
	for i, b := range p.free {
		if cap(b) >= n && (best < 0 || cap(b) < cap(p.free[best])) {
			best = i
		}
	}
	if best < 0 {
		p.mu.Unlock()
		return make([]kgo.Record, n, kgoClass(n))
	}
	b := p.free[best]
	last := len(p.free) - 1
	p.free[best], p.free[last] = p.free[last], nil
	p.free = p.free[:last]
	p.total -= cap(b)
	p.mu.Unlock()
	return b[:n]
}

// put takes b back once franz-go ran the promise of each of its records
// and nothing else refers to them. It zeroes the records first, so that a
// pooled array keeps no record's bytes alive.
func (p *kgoPool) put(b []kgo.Record) {
	if cap(b) == 0 {
		return
	}
	clear(b[:cap(b)])
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.total+cap(b) > maxPooledKgo {
		return
	}
	p.free = append(p.free, b[:0])
	p.total += cap(b)
}
