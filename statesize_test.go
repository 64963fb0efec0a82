package kstate_test

import (
	"iter"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// lastRow keeps each key's last row in a ValueState and emits it; the row
// "big" stores 2 MiB instead, over the default MaxRecordBytes.
type lastRow struct{ last state.ValueState[string] }

func (p *lastRow) Init(h processor.Handle) (err error) {
	p.last, err = processor.NewValueState(h, "last", state.String())
	return err
}

func (p *lastRow) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for v := range rows {
		s := v
		if v == "big" {
			s = strings.Repeat("x", 2<<20)
		}
		if err := p.last.Update(s); err != nil {
			return err
		}
		if err := out.Emit(v); err != nil {
			return err
		}
	}
	return nil
}

func (p *lastRow) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (p *lastRow) Close() error { return nil }

// TestEmbeddedOversizedStateDeadLettered: issue #25, on the produce path
// of a Kafka cluster: an oversized state value under
// ProcessingErrorDeadLetter stopped Run with a RecordTooLargeError naming
// the raw changelog key (and so on every restart). Now its key's row goes
// to the dead-letter topic, the other keys commit, Run carries on, and the
// key works again with a value that fits.
func TestEmbeddedOversizedStateDeadLettered(t *testing.T) {
	brokers := startEmbedded(t, 2)
	cfg := config(brokers, t.TempDir(), func() processor.StatefulProcessor[string, string, string] { return &lastRow{} })
	cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
	app := newApp(t, cfg)
	stop, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "a=1", "k=big", "b=2")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 2, 30*time.Second), "a=[1] b=[2]")
	dl := testprocs.WaitOutputs(t, brokers, app.DeadLetterTopic(), 1, 30*time.Second)
	if got := dl.String(); got != "k=[big]" {
		t.Fatalf("dead letters %s, want k=[big]", got)
	}
	testprocs.Produce(t, brokers, "in", "k=3")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 3, 30*time.Second), "a=[1] b=[2] k=[3]")
	select {
	case err := <-done:
		t.Fatalf("Run stopped: %v", err)
	default:
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if m := app.Metrics(); m.Total.DeadLettered != 1 || m.Total.ProcessingErrors != 1 {
		t.Fatalf("DeadLettered %d, ProcessingErrors %d; want 1, 1", m.Total.DeadLettered, m.Total.ProcessingErrors)
	}
}
