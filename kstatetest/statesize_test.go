package kstatetest_test

import (
	"errors"
	"iter"
	"slices"
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// blobs keeps the last row of each key in a ValueState "last", appends it
// to a ListState "rows" and a MapState "byRow", and emits "key=row". A row
// "value:N", "list:N" or "map:N" writes N bytes to that variable instead;
// with the prefix "ignore-" the processor ignores the write's error.
type blobs struct {
	last  state.ValueState[string]
	rows  state.ListState[string]
	byRow state.MapState[string, string]
}

func (b *blobs) Init(h processor.Handle) (err error) {
	if b.last, err = processor.NewValueState(h, "last", state.String()); err != nil {
		return err
	}
	if b.rows, err = processor.NewListState(h, "rows", state.String()); err != nil {
		return err
	}
	b.byRow, err = processor.NewMapState(h, "byRow", state.String(), state.String())
	return err
}

func (b *blobs) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	for v := range rows {
		ignore := strings.HasPrefix(v, "ignore-")
		what, n, _ := strings.Cut(strings.TrimPrefix(v, "ignore-"), ":")
		var err error
		switch size := len(n) * (1 << 19); what { // "x" = 512 KiB, "xxx" = 1.5 MiB
		case "value":
			err = b.last.Update(strings.Repeat("v", size))
		case "list":
			err = b.rows.AppendValue(strings.Repeat("l", size))
		case "map":
			err = b.byRow.UpdateValue("big", strings.Repeat("m", size))
		default:
			if err = b.last.Update(v); err == nil {
				if err = b.rows.AppendValue(v); err == nil {
					err = b.byRow.UpdateValue(v, v)
				}
			}
		}
		if err != nil && !ignore {
			return err
		}
		if err := out.Emit(key + "=" + v); err != nil {
			return err
		}
	}
	return nil
}

func (b *blobs) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (b *blobs) Close() error { return nil }

func blobConfig() kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.String(), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &blobs{} },
		Output: kstate.Output[string, string]{
			Serde: serde.String(),
		},
	}
}

// TestDeadLetterOversizedState: issue #25, a state value whose changelog
// record is over MaxRecordBytes was not dead-lettered under
// ProcessingErrorDeadLetter (an oversized output was): the producer
// refused the whole transaction, on every retry. Now the write is refused
// per key: the key's rows of the batch go to the dead-letter topic with an
// error naming the variable and the key, its state changes of the batch
// are dropped, every other key commits; a processor that ignores the
// write's error fails its call all the same.
func TestDeadLetterOversizedState(t *testing.T) {
	for _, tc := range []struct{ row, variable string }{
		{"value:xxx", `ValueState "last"`},
		{"list:xxx", `ListState "rows"`},
		{"map:xxx", `MapState "byRow"`},
		{"ignore-value:xxx", `ValueState "last"`},
	} {
		t.Run(tc.row, func(t *testing.T) {
			cfg := blobConfig()
			cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
			d := kstatetest.New(t, cfg, kstatetest.Partitions(2))
			d.Input("big", "a")
			d.MustRunBatch()
			d.Outputs()

			d.Input("big", "b") // written, then dropped with the key's batch
			d.Input("big", tc.row)
			d.Input("small", "c")
			d.Input("big2", "value:x") // 512 KiB: fits 1 MiB
			d.MustRunBatch()

			if got, want := d.OutputValues(), []string{"small=c", "big2=value:x"}; !sameSet(got, want) {
				t.Errorf("outputs %q, want %q", got, want)
			}
			if v, _ := kstatetest.ValueOf(d, "big", "last", state.String()); v != "a" {
				t.Errorf("big's last = %.20q, want \"a\" (its batch dropped)", v)
			}
			if l := kstatetest.ListOf(d, "big", "rows", state.String()); !slices.Equal(l, []string{"a"}) {
				t.Errorf("big's rows: %d elements, want [a]", len(l))
			}
			if m := kstatetest.MapOf(d, "big", "byRow", state.String(), state.String()); len(m) != 1 {
				t.Errorf("big's byRow: %d entries, want 1", len(m))
			}
			if v, _ := kstatetest.ValueOf(d, "small", "last", state.String()); v != "c" {
				t.Errorf("small's last = %q, want c", v)
			}
			if v, _ := kstatetest.ValueOf(d, "big2", "last", state.String()); len(v) != 1<<19 {
				t.Errorf("big2's last: %d bytes, want %d", len(v), 1<<19)
			}
			dl := d.DeadLetters()
			if len(dl) != 2 {
				t.Fatalf("%d dead letters, want 2 (both rows of big)", len(dl))
			}
			for i, want := range []string{"b", tc.row} {
				if string(dl[i].Key) != "big" || string(dl[i].Value) != want {
					t.Errorf("dead letter %d = %s=%s, want big=%s", i, dl[i].Key, dl[i].Value, want)
				}
				h := dl[i].Headers[kstate.HeaderError]
				for _, w := range []string{`HandleInputRows(key "big")`, tc.variable, "too large", "MaxRecordBytes = 1048576"} {
					if !strings.Contains(h, w) {
						t.Errorf("dead letter %d: error header %q does not say %q", i, h, w)
					}
				}
			}
			if c := d.Counters(); c.DeadLettered != 2 || c.ProcessingErrors != 1 {
				t.Errorf("DeadLettered %d, ProcessingErrors %d; want 2, 1", c.DeadLettered, c.ProcessingErrors)
			}

			// The key is not poisoned, and its state survives a restart.
			d.Restart()
			d.Input("big", "d")
			d.MustRunBatch()
			if l := kstatetest.ListOf(d, "big", "rows", state.String()); !slices.Equal(l, []string{"a", "d"}) {
				t.Errorf("after recovery: big's rows %q, want [a d]", l)
			}
		})
	}
}

// TestOversizedStateFails: under the default ProcessingErrorFail the batch
// fails with a UserError wrapping ErrStateTooLarge that names the method,
// the key, the variable and the limit, and nothing of it is committed.
func TestOversizedStateFails(t *testing.T) {
	d := kstatetest.New(t, blobConfig())
	d.Input("z", "1")
	d.MustRunBatch()
	d.Outputs()
	d.Input("small", "c")
	d.Input("big", "ignore-map:xxx")
	err := d.RunBatch()
	var ue *kstate.UserError
	if !errors.As(err, &ue) || !errors.Is(err, kstate.ErrStateTooLarge) || ue.Key != `"big"` || ue.Method != "HandleInputRows" {
		t.Fatalf("RunBatch = %v, want a UserError of key big wrapping ErrStateTooLarge", err)
	}
	t.Logf("%v", err)
	for _, w := range []string{`MapState "byRow"`, "UpdateValue", "MaxRecordBytes = 1048576", "raise MaxRecordBytes"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("error %q does not say %q", err, w)
		}
	}
	if out := d.OutputValues(); len(out) != 0 {
		t.Errorf("outputs %q after a failed batch", out)
	}
	if _, ok := kstatetest.ValueOf(d, "small", "last", state.String()); ok {
		t.Error("small has state after a failed batch")
	}
}
