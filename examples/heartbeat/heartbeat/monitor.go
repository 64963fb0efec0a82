// Package heartbeat is the heartbeat example: a monitor that raises an
// alert when a sensor stops sending heartbeats, with processing-time timers,
// and forgets sensors that stay away, with TTL. The command in the parent
// folder runs it; Run is the scripted story it tells.
package heartbeat

import (
	"iter"
	"time"

	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Event kinds emitted by Monitor.
const (
	Online = "ONLINE" // first heartbeat of a sensor the monitor does not know (any more)
	Silent = "SILENT" // no heartbeat for Timeout
	Back   = "BACK"   // a heartbeat from a silent sensor
)

// Event is an output row of Monitor.
type Event struct {
	Sensor string `json:"sensor"`
	Kind   string `json:"kind"`
	// AtMs is the processing time of the batch that emitted the event.
	AtMs int64 `json:"at"`
	// LastMs is the last heartbeat before the silence (Silent and Back).
	LastMs int64 `json:"last,omitempty"`
}

// Monitor is a ProcessingTime processor over heartbeats keyed by sensor id
// (the row's value is not used). Every heartbeat moves the sensor's timer to
// now+Timeout; if it fires, the sensor is silent. State lives for Retention
// after its last write (TTL), so a sensor that never comes back is
// forgotten without any code running for it.
type Monitor struct {
	// Defaults supplies the no-op Close it does not need.
	processor.Defaults[string, Event]

	Timeout   time.Duration
	Retention time.Duration

	h        processor.Handle
	lastSeen state.ValueState[int64] // last heartbeat, ms
	silent   state.ValueState[bool]  // present while the sensor is silent
}

// NewMonitor returns a Topology.NewProcessor function.
func NewMonitor(timeout, retention time.Duration) func() processor.StatefulProcessor[string, string, Event] {
	return func() processor.StatefulProcessor[string, string, Event] {
		return &Monitor{Timeout: timeout, Retention: retention}
	}
}

// Init declares the state variables, both with a TTL.
func (m *Monitor) Init(h processor.Handle) (err error) {
	m.h = h
	ttl := state.WithTTL(m.Retention)
	if m.lastSeen, err = processor.NewValueState(h, "lastSeen", state.Int64(), ttl); err != nil {
		return err
	}
	m.silent, err = processor.NewValueState(h, "silent", state.Bool(), ttl)
	return err
}

// HandleInputRows handles the heartbeats of one sensor in a batch.
func (m *Monitor) HandleInputRows(sensor string, _ iter.Seq[string], tv processor.TimerValues, out processor.Emitter[Event]) error {
	now := tv.ProcessingTimeMs() // never time.Now(): one time per batch, from the engine's clock
	last, known, err := m.lastSeen.Get()
	if err != nil {
		return err
	}
	wasSilent, err := m.silent.Exists()
	if err != nil {
		return err
	}
	switch {
	case !known:
		err = out.Emit(Event{Sensor: sensor, Kind: Online, AtMs: now})
	case wasSilent:
		if err = m.silent.Clear(); err == nil {
			err = out.Emit(Event{Sensor: sensor, Kind: Back, AtMs: now, LastMs: last})
		}
	}
	if err != nil {
		return err
	}
	if err := m.lastSeen.Update(now); err != nil {
		return err
	}
	// Move the sensor's timer: delete the pending one, register a new one.
	pending, err := m.h.ListTimers()
	if err != nil {
		return err
	}
	for _, t := range pending {
		if err := m.h.DeleteTimer(t); err != nil {
			return err
		}
	}
	return m.h.RegisterTimer(now + m.Timeout.Milliseconds())
}

// HandleExpiredTimer runs when a sensor sent nothing for Timeout.
func (m *Monitor) HandleExpiredTimer(sensor string, tv processor.TimerValues, _ processor.ExpiredTimerInfo, out processor.Emitter[Event]) error {
	last, known, err := m.lastSeen.Get()
	if err != nil || !known { // forgotten (Retention < Timeout): nothing to report
		return err
	}
	if err := m.silent.Update(true); err != nil {
		return err
	}
	return out.Emit(Event{Sensor: sensor, Kind: Silent, AtMs: tv.ProcessingTimeMs(), LastMs: last})
}
