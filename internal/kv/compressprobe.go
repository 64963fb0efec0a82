package kv

import (
	"compress/flate"
)

// compressProbe decides whether a store's blocks are worth compressing,
// from a sample of the values it writes. RocksDB compresses every block it
// writes (in flushes and in every compaction, ~10 times a value at 10M
// keys) and stores a block uncompressed when that saved less than an
// eighth of it. So values that do not compress (encrypted, random, already
// compressed) cost the compressor's time on every rewrite for nothing: LZ4
// was 4.4 % of the CPU of the 10M-key big workload, whose values are
// random (docs/BENCHMARKS.md, "State larger than memory").
//
// The probe takes about one byte in probeStride of the values written
// (whole values, spread over the writes), packs them into chunks the size
// of a block and deflates each on its own at flate.BestSpeed: 0.25 % of
// the CPU of the 10M-key workload (1 % at one byte in 32), and a verdict
// per 16 MiB of values written. Deflate compresses better than LZ4 and
// Snappy, so when it saves less than probeOffBelow of a window of samples,
// so would they, and RocksDB would have stored the blocks as they were:
// compression is turned off. It is turned on again when a window saves
// more than probeOnAbove. A store whose compression was chosen explicitly
// has no probe. Small values (under probeMinValue bytes on average) never
// turn it off: their blocks are mostly keys and the keys' sequence numbers,
// which the sample leaves out and which may compress.
type compressProbe struct {
	debt  int    // value bytes to pass over before the next sampled value
	chunk []byte // sampled values not yet deflated (< probeChunk bytes)
	// in and out are the bytes deflated in the current window, before and
	// after.
	in, out int
	values  int  // the values sampled in the current window
	on      bool // the verdict: compress
	fw      *flate.Writer
	cw      countWriter
}

const (
	probeStride   = 128
	probeChunk    = 4 << 10
	probeWindow   = 128 << 10
	probeOffBelow = 0.10
	probeOnAbove  = 0.20
	probeMinValue = 64
)

func newCompressProbe() *compressProbe { return &compressProbe{on: true} }

// add offers a written value to the sample.
func (p *compressProbe) add(v []byte) {
	if p.debt -= len(v); p.debt > 0 || len(v) == 0 {
		return
	}
	p.debt += (probeStride - 1) * len(v)
	p.values++
	for len(v) > 0 {
		n := min(len(v), probeChunk-len(p.chunk))
		p.chunk = append(p.chunk, v[:n]...)
		v = v[n:]
		if len(p.chunk) == probeChunk {
			p.deflate()
		}
	}
}

func (p *compressProbe) deflate() {
	if p.fw == nil {
		p.fw, _ = flate.NewWriter(&p.cw, flate.BestSpeed) // BestSpeed is a valid level
	} else {
		p.fw.Reset(&p.cw)
	}
	p.cw = 0
	_, _ = p.fw.Write(p.chunk) // a countWriter never fails
	_ = p.fw.Close()
	p.in += len(p.chunk)
	p.out += int(p.cw)
	p.chunk = p.chunk[:0]
}

// verdict returns whether to compress, and whether that changed since the
// last call: at the end of each window of samples.
func (p *compressProbe) verdict() (on, changed bool) {
	if p.in < probeWindow {
		return p.on, false
	}
	saved := 1 - float64(p.out)/float64(p.in)
	large := p.in >= probeMinValue*p.values
	p.in, p.out, p.values = 0, 0, 0
	switch {
	case p.on && saved < probeOffBelow && large:
		p.on = false
		return false, true
	case !p.on && saved > probeOnAbove:
		p.on = true
		return true, true
	}
	return p.on, false
}

// countWriter counts the bytes written to it.
type countWriter int

func (w *countWriter) Write(b []byte) (int, error) {
	*w += countWriter(len(b))
	return len(b), nil
}
