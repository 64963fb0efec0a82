package integration

import (
	"iter"
	"strconv"
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// prevLen keeps each key's last row in a ValueState and emits
// "row:<length of the previous row>"; the row "big" stores 2 MiB instead,
// over the default MaxRecordBytes.
type prevLen struct{ last state.ValueState[string] }

func newPrevLen() processor.StatefulProcessor[string, string, string] { return &prevLen{} }

func (p *prevLen) Init(h processor.Handle) (err error) {
	p.last, err = processor.NewValueState(h, "last", state.String())
	return err
}

func (p *prevLen) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for v := range rows {
		prev, _, err := p.last.Get()
		if err != nil {
			return err
		}
		s := v
		if v == "big" {
			s = strings.Repeat("x", 2<<20)
		}
		if err := p.last.Update(s); err != nil {
			return err
		}
		if err := out.Emit(v + ":" + strconv.Itoa(len(prev))); err != nil {
			return err
		}
	}
	return nil
}

func (p *prevLen) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (p *prevLen) Close() error { return nil }

// TestFaultOversizedStateDeadLettered: issue #25, on the real broker: a
// state value over MaxRecordBytes under ProcessingErrorDeadLetter made the
// producer refuse the whole transaction, and Run stopped with a
// RecordTooLargeError naming the raw changelog key, at every restart. Now
// the key's row is dead-lettered with an error naming the variable and the
// key, the other keys commit, Run carries on; the key's state is as before
// the failed batch, also when restored from the changelog.
func TestFaultOversizedStateDeadLettered(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	cfg := e.config(t, newPrevLen)
	cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
	app := newSpecApp(t, cfg)
	stop, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, e.brokers, e.in, "k=1")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 1, waitOut), "k=[1:0]")
	testprocs.Produce(t, e.brokers, e.in, "a=1", "k=big", "b=2")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 3, waitOut), "a=[1:0] b=[2:0] k=[1:0]")
	dlq := waitRecords(t, e.brokers, app.DeadLetterTopic(), 1)
	if len(dlq) != 1 || string(dlq[0].Key) != "k" || string(dlq[0].Value) != "big" {
		t.Fatalf("dead letters %v, want k=big", dlq)
	}
	for _, w := range []string{`HandleInputRows(key "k")`, `ValueState "last"`, "too large", "MaxRecordBytes"} {
		checkDeadLetter(t, e, dlq[0], "process", w)
	}
	select {
	case err := <-done:
		t.Fatalf("Run stopped: %v", err)
	default:
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	// A new instance restores from the changelog: k's value is still "1".
	cfg.State.Dir = t.TempDir()
	app = newSpecApp(t, cfg)
	stop = testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "k=3")
	wantOutputs(t, testprocs.WaitOutputs(t, e.brokers, e.out, 4, waitOut), "a=[1:0] b=[2:0] k=[1:0 3:1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
}
