// Package eventtime is the event-time example: one-minute tumbling windows
// per sensor, closed by event-time timers when the watermark passes their
// end; rows older than the watermark are dropped as late and counted. The
// command in the parent folder runs it; Run is the scripted story it tells.
package eventtime

import (
	"iter"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Reading is an input row: a temperature measured at an event time.
type Reading struct {
	AtMs    int64   `json:"at"` // event time, ms since the epoch
	Celsius float64 `json:"celsius"`
}

// EventTime is the Topology.EventTime function: a reading's event time is
// its own timestamp field, not the Kafka record's.
func EventTime(r Reading, _ int64) int64 { return r.AtMs }

// Window is an output row: the summary of one sensor's window.
type Window struct {
	Sensor      string  `json:"sensor"`
	StartMs     int64   `json:"start"`
	EndMs       int64   `json:"end"`
	Count       int64   `json:"count"`
	Avg         float64 `json:"avg"`
	Max         float64 `json:"max"`
	WatermarkMs int64   `json:"watermark"` // when the window was closed
}

// agg is the running aggregate of one open window.
type agg struct {
	Count int64   `json:"n"`
	Sum   float64 `json:"sum"`
	Max   float64 `json:"max"`
}

// Windows is an EventTime processor over readings keyed by sensor. Every
// open window of a sensor is an entry of a MapState keyed by the window's
// start, so iteration and cleanup are ordered by time; an event-time timer
// at the window's end closes it.
type Windows struct {
	// Defaults supplies the no-op Close it does not need.
	processor.Defaults[string, Window]

	Size time.Duration

	h    processor.Handle
	open state.MapState[int64, agg]
}

// NewWindows returns a Topology.NewProcessor function.
func NewWindows(size time.Duration) func() processor.StatefulProcessor[string, Reading, Window] {
	return func() processor.StatefulProcessor[string, Reading, Window] { return &Windows{Size: size} }
}

// Init declares the open windows.
func (w *Windows) Init(h processor.Handle) (err error) {
	w.h = h
	w.open, err = processor.NewMapState(h, "open", state.Int64(), state.JSON[agg]())
	return err
}

// HandleInputRows adds a sensor's readings to their windows. Late readings
// never get here: the engine drops rows at or before the watermark.
func (w *Windows) HandleInputRows(_ string, rows iter.Seq[Reading], _ processor.TimerValues, _ processor.Emitter[Window]) error {
	size := w.Size.Milliseconds()
	for r := range rows {
		start := r.AtMs - r.AtMs%size
		a, ok, err := w.open.GetValue(start)
		if err != nil {
			return err
		}
		if !ok {
			a.Max = r.Celsius
			// The window closes when the watermark reaches its end.
			if err := w.h.RegisterTimer(start + size); err != nil {
				return err
			}
		}
		a.Count++
		a.Sum += r.Celsius
		a.Max = max(a.Max, r.Celsius)
		if err := w.open.UpdateValue(start, a); err != nil {
			return err
		}
	}
	return nil
}

// HandleExpiredTimer closes the window ending at the timer.
func (w *Windows) HandleExpiredTimer(sensor string, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[Window]) error {
	start := t.ExpiryTimeMs - w.Size.Milliseconds()
	a, ok, err := w.open.GetValue(start)
	if err != nil || !ok {
		return err
	}
	if err := w.open.RemoveKey(start); err != nil {
		return err
	}
	return out.Emit(Window{
		Sensor: sensor, StartMs: start, EndMs: t.ExpiryTimeMs,
		Count: a.Count, Avg: a.Sum / float64(a.Count), Max: a.Max,
		WatermarkMs: tv.WatermarkMs(),
	})
}
