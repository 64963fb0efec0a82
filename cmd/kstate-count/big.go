package main

import (
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// The big workload (-processor big): count's output, but every key's state
// is a value of -value-bytes bytes (default 200) instead of an 8-byte
// count, so that 10M keys make several GB of state, more than the block
// cache holds (make bench-peers WORKLOAD=big; docs/BENCHMARKS.md "State
// larger than memory"). The value is bigValue's layout, the same in the
// Kafka Streams peer (internal/tools/benchpeers/heavy/kstreams BigCount):
// the count (int64, big-endian), the last record's send time (int64,
// big-endian), then filler that changes on every update and does not
// compress (a splitmix64 stream seeded by count and send time), so neither
// the store nor the changelog shrinks it below its size.
const defaultBigValueBytes = 200

// bigCounter is the big workload's processor: one ValueState of
// valueBytes bytes per key, one output per input record.
type bigCounter struct {
	processor.Defaults[string, countOut]

	valueBytes int
	value      state.ValueState[[]byte]
}

func (c *bigCounter) Init(h processor.Handle) (err error) {
	c.value, err = processor.NewValueState(h, "big", state.Bytes())
	return err
}

func (c *bigCounter) HandleInputRows(key string, rows iter.Seq[int64], _ processor.TimerValues, out processor.Emitter[countOut]) error {
	v, ok, err := c.value.Get()
	if err != nil {
		return err
	}
	var n, sent int64
	if ok {
		if len(v) < 16 {
			return fmt.Errorf("kstate-count: key %q: stored value of %d bytes, want %d", key, len(v), c.valueBytes)
		}
		n = int64(binary.BigEndian.Uint64(v))
	}
	for s := range rows {
		n++
		sent = s
		if err := out.Emit(countOut{count: n, sentNs: s}); err != nil {
			return err
		}
	}
	return c.value.Update(bigValue(make([]byte, c.valueBytes), n, sent))
}

// bigValue fills b (at least 16 bytes) with the big workload's state value
// for count n and send time sent, and returns it.
func bigValue(b []byte, n, sent int64) []byte {
	binary.BigEndian.PutUint64(b, uint64(n))
	binary.BigEndian.PutUint64(b[8:], uint64(sent))
	x := uint64(n)*0x9e3779b97f4a7c15 ^ uint64(sent)
	for i := 16; i < len(b); i += 8 {
		x = splitmix64(x)
		var w [8]byte
		binary.BigEndian.PutUint64(w[:], x)
		copy(b[i:], w[:])
	}
	return b
}

// splitmix64 is the harness's mixing function (load/workload.go).
func splitmix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}
