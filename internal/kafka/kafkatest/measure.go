package kafkatest

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/testlog"
)

// LatencyReport summarizes MeasureTxnLatency.
type LatencyReport struct {
	Txns, PerTxn       int
	ProduceP50, EndP50 time.Duration // Produce (wait for acks) and End(commit)
	EndP90, EndMax     time.Duration
	LoopP50            time.Duration // Poll + Begin + Produce + End
	RecordsPerSec      float64
}

func (r LatencyReport) String() string {
	return fmt.Sprintf("%d txns x %d records: loop p50 %v, produce p50 %v, End(commit) p50 %v p90 %v max %v, %.0f records/s",
		r.Txns, r.PerTxn, r.LoopP50, r.ProduceP50, r.EndP50, r.EndP90, r.EndMax, r.RecordsPerSec)
}

// MeasureTxnLatency runs the exactly-once loop of one member on a
// pre-filled one-partition input: Poll perTxn records → Begin → Produce
// perTxn records → End(commit), txns times, and reports latencies. The
// first transaction (producer id and group join) is excluded.
func MeasureTxnLatency(t *testing.T, brokers []string, txns, perTxn int) LatencyReport {
	adm := NewAdmin(t, brokers)
	in, out := Topic(t, adm, "in", 1, false), Topic(t, adm, "out", 1, false)
	value := make([]byte, 100)
	input := make([]kafka.Record, 0, perTxn)
	for i := 0; i < (txns+1)*perTxn; i++ {
		input = append(input, kafka.Record{Topic: in, Partition: 0, Key: fmt.Appendf(nil, "k%d", i%1000), Value: value})
		if len(input) == perTxn {
			PlainProduce(t, brokers, input...)
			input = input[:0]
		}
	}
	ctx := Ctx(t, 10*time.Minute)
	s := NewSession(t, kafka.SessionConfig{Brokers: brokers, GroupID: Name(t, "group"), Topics: []string{in}, Logger: testlog.Discard()})

	var loops, produces, ends []time.Duration
	start := time.Now()
	for i := 0; i <= txns; i++ {
		if i == 1 {
			start = time.Now()
		}
		t0 := time.Now()
		recs := PollN(t, ctx, s, perTxn)
		if err := s.Begin(); err != nil {
			t.Fatal(err)
		}
		t1 := time.Now()
		if _, err := s.Produce(ctx, transform(out, recs)); err != nil {
			t.Fatal(err)
		}
		t2 := time.Now()
		committed, err := s.End(ctx, true)
		if err != nil || !committed {
			t.Fatalf("End(commit) = %v, %v", committed, err)
		}
		t3 := time.Now()
		if i > 0 {
			loops, produces, ends = append(loops, t3.Sub(t0)), append(produces, t2.Sub(t1)), append(ends, t3.Sub(t2))
		}
	}
	elapsed := time.Since(start)
	q := func(ds []time.Duration, p float64) time.Duration {
		ds = slices.Clone(ds)
		slices.Sort(ds)
		return ds[min(len(ds)-1, int(p*float64(len(ds))))]
	}
	return LatencyReport{
		Txns: txns, PerTxn: perTxn,
		LoopP50: q(loops, 0.5), ProduceP50: q(produces, 0.5),
		EndP50: q(ends, 0.5), EndP90: q(ends, 0.9), EndMax: q(ends, 1),
		RecordsPerSec: float64(txns*perTxn) / elapsed.Seconds(),
	}
}
