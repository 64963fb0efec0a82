package main

import (
	"encoding/binary"
	"fmt"
	"iter"

	"github.com/kstate/kstate/internal/benchwork"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// The benchmark's records. An input value is the produce time (unix ns, 8
// bytes big-endian), a number to aggregate (8 bytes) and padding; an output
// value is the key's count after the row and the input row's produce time,
// so that the consumer of the output computes the end-to-end latency of
// every row without a lookup.

// benchRow is a decoded input value.
type benchRow struct {
	ProducedNs int64
	V          int64
}

// benchOut is an emitted row: one per input row.
type benchOut struct {
	Count      int64
	ProducedNs int64
}

// minValueBytes is the size of an input value without padding.
const minValueBytes = 16

func encodeRow(buf []byte, r benchRow) []byte {
	binary.BigEndian.PutUint64(buf[0:], uint64(r.ProducedNs))
	binary.BigEndian.PutUint64(buf[8:], uint64(r.V))
	return buf
}

type rowCodec struct{}

func (rowCodec) Serialize(r benchRow) ([]byte, error) {
	return encodeRow(make([]byte, minValueBytes), r), nil
}

func (rowCodec) Deserialize(b []byte) (benchRow, error) {
	if len(b) < minValueBytes {
		return benchRow{}, fmt.Errorf("bench: input value has %d bytes, want at least %d", len(b), minValueBytes)
	}
	return benchRow{ProducedNs: int64(binary.BigEndian.Uint64(b)), V: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}

type outCodec struct{}

func (outCodec) Serialize(o benchOut) ([]byte, error) {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(o.Count))
	binary.BigEndian.PutUint64(b[8:], uint64(o.ProducedNs))
	return b, nil
}

func (outCodec) Deserialize(b []byte) (benchOut, error) {
	if len(b) != 16 {
		return benchOut{}, fmt.Errorf("bench: output value has %d bytes, want 16", len(b))
	}
	return benchOut{Count: int64(binary.BigEndian.Uint64(b)), ProducedNs: int64(binary.BigEndian.Uint64(b[8:]))}, nil
}

// benchProc is one processor under test: how to build it and the time mode
// it needs.
type benchProc struct {
	name     string
	timeMode processor.TimeMode
	newProc  func() processor.StatefulProcessor[string, benchRow, benchOut]
	about    string
}

func benchProcs(o benchOptions) map[string]benchProc {
	history := o.History
	return map[string]benchProc{
		"count": {
			name: "count", timeMode: processor.NoTime,
			newProc: func() processor.StatefulProcessor[string, benchRow, benchOut] { return &countProc{} },
			about:   "ValueState[int64] count per key (NoTime)",
		},
		"heavy": {
			name: "heavy", timeMode: processor.ProcessingTime,
			newProc: func() processor.StatefulProcessor[string, benchRow, benchOut] { return newHeavyProc(history) },
			about: fmt.Sprintf("per key: ListState of the last %d values, MapState of 4 aggregates, "+
				"an idle timer moved on every call (ProcessingTime)", history),
		},
		"churn": {
			name: "churn", timeMode: processor.ProcessingTime,
			newProc: func() processor.StatefulProcessor[string, benchRow, benchOut] {
				return &churnProc{gap: o.SessionGap, history: history}
			},
			about: fmt.Sprintf("sessions (bench_churn.go): per call a MapState iterated, a ListState read, the timer moved to now+%v; "+
				"a session closes when it fires (map and list cleared): deleted entries pile up (ProcessingTime)", o.SessionGap),
		},
	}
}

// countProc is the stateful count: one ValueState per key, one output per
// row.
type countProc struct {
	count state.ValueState[int64]
}

func (c *countProc) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *countProc) HandleInputRows(_ string, rows iter.Seq[benchRow], _ processor.TimerValues, out processor.Emitter[benchOut]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for r := range rows {
		n++
		if err := out.Emit(benchOut{Count: n, ProducedNs: r.ProducedNs}); err != nil {
			return err
		}
	}
	return c.count.Update(n)
}

func (c *countProc) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[benchOut]) error {
	return nil
}

func (c *countProc) Close() error { return nil }

// newHeavyProc is benchwork's heavy processor on the benchmark's rows: a row
// adds its V, and its output carries the row's produce time.
func newHeavyProc(history int) *benchwork.Heavy[benchRow, benchOut] {
	return &benchwork.Heavy[benchRow, benchOut]{
		History: history,
		Value:   func(r benchRow) int64 { return r.V },
		Out:     func(n int64, r benchRow) benchOut { return benchOut{Count: n, ProducedNs: r.ProducedNs} },
	}
}
