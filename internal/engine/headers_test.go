package engine

import (
	"errors"
	"iter"
	"testing"
	"unsafe"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
)

// TestInputHeadersNotCopied: a polled record's headers reach
// ValueFromRecord's processor.Record and the record's dead letter as the
// slice the session delivered (issue #26: one Header type, one copy at the
// franz-go boundary), not re-allocated at each hop.
func TestInputHeadersNotCopied(t *testing.T) {
	var seen []processor.Header
	cfg := strCfg(func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for v := range rows {
					if err := out.Emit(v); err != nil {
						return err
					}
				}
				return nil
			},
		}
	}, processor.NoTime)
	cfg.ValueFromRecord = func(r processor.Record) (string, error) {
		seen = r.Headers
		if string(r.Value) == "bad" {
			return "", errors.New("bad value")
		}
		return string(r.Value), nil
	}
	cfg.OnDecodeError = PolicyDeadLetter
	cfg.Backend = kv.NewMemory()
	task, err := Open(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer task.Close()
	if err := task.Start(); err != nil {
		t.Fatal(err)
	}
	c := &Coordinator{cfg: CoordinatorConfig{Topics: []string{"in"}}, partitions: 4}
	hs := []Header{{Key: "trace", Value: []byte("t1")}, {Key: "span", Value: []byte("s1")}}
	same := func(a, b []Header) bool { return len(a) > 0 && unsafe.SliceData(a) == unsafe.SliceData(b) }

	for _, value := range []string{"good", "bad"} {
		m := Message{Topic: "in", Partition: PartitionFor([]byte("k"), 4), Offset: 7, Key: []byte("k"), Value: []byte(value), Headers: hs}
		r := c.toRecord(&m)
		if !same(r.Headers, hs) {
			t.Fatalf("%s: the task record's headers are a copy of the polled record's", value)
		}
		seen = nil
		res, err := task.RunBatch(1, []Record{r})
		if err != nil {
			t.Fatal(err)
		}
		task.Abort() // the next batch starts from the same state
		if !same(seen, hs) {
			t.Fatalf("%s: ValueFromRecord got headers %v, a copy of the polled record's (or none)", value, seen)
		}
		if value == "good" {
			if len(res.Outputs) != 1 || len(res.DeadLetters) != 0 {
				t.Fatalf("good: %d outputs, %d dead letters", len(res.Outputs), len(res.DeadLetters))
			}
			continue
		}
		if len(res.DeadLetters) != 1 {
			t.Fatalf("bad: %d dead letters", len(res.DeadLetters))
		}
		dl := res.DeadLetters[0].Headers
		if len(dl) != len(hs)+7 || dl[0].Key != "trace" || dl[1].Key != "span" || dl[2].Key != HeaderStage {
			t.Fatalf("bad: dead letter headers %v", dl)
		}
		// The dead letter's slice is its own (the kstate.* headers follow),
		// its original headers' bytes are the polled record's.
		if unsafe.SliceData(dl[0].Value) != unsafe.SliceData(hs[0].Value) || unsafe.SliceData(dl[1].Value) != unsafe.SliceData(hs[1].Value) {
			t.Fatal("bad: the dead letter's original headers are copies")
		}
	}
}
