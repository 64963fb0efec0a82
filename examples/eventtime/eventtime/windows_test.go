package eventtime_test

import (
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/eventtime/eventtime"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// One-minute windows close when the watermark (max event time − 10 s)
// passes their end; a reading at or before the watermark is late.
func TestWindows(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, eventtime.Reading, eventtime.Window]{
		KeySerde:        serde.String(),
		Inputs:          kstate.Topics(serde.JSON[eventtime.Reading](), "input"),
		NewProcessor:    eventtime.NewWindows(eventtime.WindowSize),
		TimeMode:        processor.EventTime,
		EventTime:       eventtime.EventTime,
		AllowedLateness: eventtime.AllowedLateness,
		Output: kstate.Output[string, eventtime.Window]{
			Serde:     serde.JSON[eventtime.Window](),
			EventTime: func(w eventtime.Window) int64 { return w.EndMs },
		},
	}, kstatetest.ApplicationID("eventtime"))
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	read := func(sec int64, c float64) {
		// The record timestamp is not the event time: EventTime reads AtMs.
		d.Input("s1", eventtime.Reading{AtMs: t0 + sec*1000, Celsius: c})
	}
	read(10, 20)
	read(50, 22)
	d.MustRunBatch() // watermark 12:00:40
	read(45, 30)     // out of order, after the watermark: counts
	read(30, 99)     // at or before the watermark 12:00:40: late
	read(75, 21)     // watermark → 12:01:05 once this batch commits
	d.MustRunBatch()
	if out := d.Outputs(); len(out) != 0 {
		t.Fatalf("outputs %+v before the watermark passed 12:01:00", out)
	}
	d.MustRunBatch() // the advanced watermark closes the first window
	out := d.Outputs()
	if len(out) != 1 {
		t.Fatalf("outputs %+v, want the window 12:00-12:01", out)
	}
	w := out[0].Value
	if w.StartMs != t0 || w.Count != 3 || w.Max != 30 || w.Avg != 24 || w.WatermarkMs != t0+65_000 {
		t.Errorf("window %+v, want 3 readings, max 30, avg 24, closed at watermark 12:01:05", w)
	}
	if ts := out[0].Timestamp; !ts.Equal(time.UnixMilli(t0 + 60_000)) {
		t.Errorf("output timestamp %v, want the window's end 12:01:00 (OutputEventTime)", ts)
	}
	if n := d.Counters().LateRowsDropped; n != 1 {
		t.Errorf("LateRowsDropped = %d, want 1", n)
	}
	if got := d.Timers("s1"); len(got) != 1 || got[0] != t0+120_000 {
		t.Errorf("timers %v, want the second window's end 12:02:00", got)
	}
}
