package engine

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// BenchmarkRunBatchCount is the engine's side of the count workload (issue
// #13): one task, a batch of 2,000 records over mostly distinct keys, a
// ValueState count per key and one output per record, on the in-memory
// store; RunBatch, the batch's produce records (taskRecords) and Commit.
// Run with -benchmem: allocations per record are allocs/op / 2000.
func BenchmarkRunBatchCount(b *testing.B) {
	const batch, keys = 2000, 100_000
	cfg := strCfg(benchCounter, processor.NoTime)
	cfg.Backend = kv.NewMemory()
	task, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer task.Close()
	if err := task.Start(); err != nil {
		b.Fatal(err)
	}
	c := &Coordinator{cfg: CoordinatorConfig{OutputTopic: "out", ChangelogTopic: "cl"}, outPartitions: 4, partitions: 4}
	s := &slot{part: 3, task: task}
	recs := make([]Record, batch)
	value := make([]byte, 64)
	var off int64
	b.ReportAllocs()
	for b.Loop() {
		for i := range recs {
			recs[i] = Record{Offset: off, Key: fmt.Appendf(nil, "key-%d", (off*7919)%keys), Value: value, TimestampMs: off}
			off++
		}
		res, err := task.RunBatch(off, recs)
		if err != nil {
			b.Fatal(err)
		}
		msgs, _ := c.taskRecords(s, res, nil)
		if len(msgs) < batch {
			b.Fatalf("%d records for %d inputs", len(msgs), batch)
		}
		if err := task.Commit(off); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkRunBatchHeaders is the input path of records with headers
// (issue #26): the count workload's batch of 2,000 records, each with 3
// headers, from the messages the Kafka session returns (their headers
// built outside the timer: the session's one conversion from franz-go's,
// internal/kafka's BenchmarkFromKgoHeaders) through the coordinator's task
// records (toRecord) to ValueFromRecord (the processor's view of the
// record, headers included); one record in ten fails to decode and goes to
// the dead-letter topic with its headers (OnDecodeError DeadLetter). Run
// with -benchmem -benchtime=100x and compare with BenchmarkRunBatchCount:
// the difference is what records with headers cost.
func BenchmarkRunBatchHeaders(b *testing.B) {
	const batch, keys = 2000, 100_000
	cfg := strCfg(benchCounter, processor.NoTime)
	errBad := errors.New("bad record")
	decoded := 0
	cfg.ValueFromRecord = func(r processor.Record) (string, error) {
		if len(r.Headers) != 3 || r.Headers[0].Key != "trace" {
			return "", fmt.Errorf("headers %v", r.Headers)
		}
		if string(r.Headers[2].Value) == "bad" {
			return "", errBad
		}
		decoded++
		return "v", nil
	}
	cfg.OnDecodeError = PolicyDeadLetter
	cfg.Backend = kv.NewMemory()
	task, err := Open(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer task.Close()
	if err := task.Start(); err != nil {
		b.Fatal(err)
	}
	c := &Coordinator{cfg: CoordinatorConfig{Topics: []string{"in"}, OutputTopic: "out", ChangelogTopic: "cl", DeadLetterTopic: "dlq"},
		outPartitions: 4, partitions: 4, dlqPartitions: 1}
	s := &slot{part: 3, task: task}
	msgs := make([]Message, batch)
	recs := make([]Record, batch)
	value := make([]byte, 64)
	trace, span, good, bad := []byte("0123456789abcdef"), []byte("01234567"), []byte("good"), []byte("bad")
	var off int64
	b.ReportAllocs()
	for b.Loop() {
		b.StopTimer()
		for i := range msgs {
			st := good
			if i%10 == 0 {
				st = bad
			}
			m := &msgs[i]
			*m = Message{Topic: "in", Offset: off + int64(i), Value: value, Timestamp: time.UnixMilli(off + int64(i)),
				Headers: []Header{{Key: "trace", Value: trace}, {Key: "span", Value: span}, {Key: "status", Value: st}}}
		}
		b.StartTimer()
		for i := range msgs {
			m := &msgs[i]
			// The key as BenchmarkRunBatchCount makes it (timed there too).
			m.Key = fmt.Appendf(nil, "key-%d", (m.Offset*7919)%keys)
			m.Partition = PartitionFor(m.Key, c.partitions) // as polled: none misrouted
			recs[i] = c.toRecord(m)
		}
		off += batch
		decoded = 0
		res, err := task.RunBatch(off, recs)
		if err != nil {
			b.Fatal(err)
		}
		if decoded != batch-batch/10 || len(res.DeadLetters) != batch/10 {
			b.Fatalf("%d decoded, %d dead letters of %d records", decoded, len(res.DeadLetters), batch)
		}
		if dl := res.DeadLetters[0].Headers; len(dl) != 3+dlHeaders || dl[0].Key != "trace" || string(dl[2].Value) != "bad" {
			b.Fatalf("dead letter headers %v", dl)
		}
		out, _ := c.taskRecords(s, res, nil)
		if len(out) < batch {
			b.Fatalf("%d records for %d inputs", len(out), batch)
		}
		if err := task.Commit(off); err != nil {
			b.Fatal(err)
		}
	}
}

// dlHeaders is the number of kstate.* headers of an input record's dead
// letter.
const dlHeaders = 7

// benchCounter is the count workload's processor: a ValueState count per
// key, one output per row.
func benchCounter() processor.StatefulProcessor[string, string, string] {
	var count state.ValueState[int64]
	return &fnProc[string, string, string]{
		init: func(h processor.Handle) (err error) {
			count, err = processor.NewValueState(h, "count", state.Int64())
			return err
		},
		input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
			n, _, err := count.Get()
			if err != nil {
				return err
			}
			for range rows {
				n++
				if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
					return err
				}
			}
			return count.Update(n)
		},
	}
}
