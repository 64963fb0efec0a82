package heartbeat

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// The story's settings.
const (
	Timeout   = 10 * time.Second
	Retention = time.Hour
)

// start is when the story's scripted clock starts.
var start = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

// step is one line of the story: at start+at, the sensors in beats send a
// heartbeat, and the monitor emits want events.
type step struct {
	at    time.Duration
	beats []string
	want  int
	// ttl: instead of input, wait until this many state entries were
	// removed by TTL in total.
	ttl int64
}

var story = []step{
	{at: 0, beats: []string{"s1", "s2"}, want: 2},
	{at: 5 * time.Second, beats: []string{"s1"}},
	{at: 10 * time.Second, want: 1},                        // s2's timer fires
	{at: 12 * time.Second, beats: []string{"s2"}, want: 1}, // s2 is back
	{at: 15 * time.Second, want: 1},                        // s1's timer fires
	{at: 22 * time.Second, want: 1},                        // s2's timer fires again
	{at: 90 * time.Minute, ttl: 4},                         // both sensors' state expires
	{at: 90 * time.Minute, beats: []string{"s1"}, want: 1},
}

// Run runs the heartbeat monitor on the Kafka cluster at brokers (an
// embedded one when empty) and tells the story of two sensors on out. The
// clock is scripted (Options.Observability.Clock) so that timers and TTL fire at exact
// times without waiting for them.
func Run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	in, alerts := env.Name("heartbeats"), env.Name("sensor-events")
	if err := env.CreateTopics(ctx, 2, in, alerts); err != nil {
		return err
	}

	clock := sandbox.NewClock(start)
	opts := env.Options("heartbeat")
	opts.Batching.TriggerInterval = time.Second // of the scripted clock: every step moves it further
	opts.Observability.Clock = clock.Now
	app, err := kstate.New(kstate.Topology[string, string, Event]{
		Inputs:       kstate.Topics(serde.String(), in),
		KeySerde:     serde.String(),
		NewProcessor: NewMonitor(Timeout, Retention),
		TimeMode:     processor.ProcessingTime,
		Output: kstate.Output[string, Event]{
			Topic: alerts,
			Serde: serde.JSON[Event](),
		},
	}, opts)
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	tail := sandbox.NewTail(env, alerts, serde.String(), serde.JSON[Event]())
	fmt.Fprintf(out, "heartbeat monitor: a sensor silent for %s raises an alert; its state is kept for %s (TTL)\n\n",
		short(Timeout), short(Retention))
	fmt.Fprintf(out, "%-8s  %-10s  %s\n", "time", "heartbeat", "events")
	var sent int64
	for _, s := range story {
		clock.Set(start.Add(s.at))
		if s.ttl > 0 {
			err := sandbox.Until(running, fmt.Sprintf("%d TTL removals", s.ttl), func() bool {
				return app.Metrics().Total.TTLRemovals >= s.ttl
			})
			if err != nil {
				return err
			}
			fmt.Fprintf(out, "%-8s  %-10s  state of every sensor expired: %d entries removed by TTL\n",
				clockTime(clock.Now()), "-", app.Metrics().Total.TTLRemovals)
			continue
		}
		rows := make([]sandbox.Row[string, string], len(s.beats))
		for i, sensor := range s.beats {
			rows[i] = sandbox.KV(sensor, "beat")
		}
		if err := sandbox.Produce(running, env, in, serde.String(), serde.String(), rows...); err != nil {
			return err
		}
		sent += int64(len(rows))
		// Wait until the heartbeats are processed (committed), so that
		// the next clock move happens after this step's batch.
		if err := sandbox.Until(running, fmt.Sprintf("%d heartbeats processed", sent), func() bool {
			return app.Metrics().Total.RowsIn >= sent
		}); err != nil {
			return err
		}
		events, err := tail.Next(running, s.want)
		if err != nil {
			return err
		}
		beats := strings.Join(s.beats, " ")
		if beats == "" {
			beats = "-"
		}
		fmt.Fprintf(out, "%-8s  %-10s  %s\n", clockTime(clock.Now()), beats, describe(events))
	}
	if err := stop(); err != nil {
		return err
	}
	if extra, err := tail.Next(ctx, 0); err != nil || len(extra) > 0 {
		return errors.Join(err, fmt.Errorf("heartbeat: unexpected events: %v", extra))
	}
	m := app.Metrics().Total
	fmt.Fprintf(out, "\ntimers registered %d, fired %d; %d heartbeats in, %d events out\n",
		m.TimersRegistered, m.TimersFired, m.RowsIn, m.RowsOut)
	return nil
}

// short formats d without zero units: 1h, not 1h0m0s.
func short(d time.Duration) string {
	s := d.String()
	if strings.HasSuffix(s, "m0s") {
		s = s[:len(s)-2]
	}
	if strings.HasSuffix(s, "h0m") {
		s = s[:len(s)-2]
	}
	return s
}

func clockTime(t time.Time) string { return t.UTC().Format(time.TimeOnly) }

// describe formats a step's events, sorted by sensor.
func describe(rows []sandbox.Row[string, Event]) string {
	if len(rows) == 0 {
		return "-"
	}
	var parts []string
	for _, r := range rows {
		parts = append(parts, r.Value.String())
	}
	slices.Sort(parts)
	return strings.Join(parts, "; ")
}

// String formats an event for the story.
func (e Event) String() string {
	switch e.Kind {
	case Silent:
		return fmt.Sprintf("%s %s (last heartbeat %s)", e.Sensor, e.Kind, clockTime(time.UnixMilli(e.LastMs)))
	case Back:
		return fmt.Sprintf("%s %s after %v of silence", e.Sensor, e.Kind, time.Duration(e.AtMs-e.LastMs)*time.Millisecond)
	}
	return e.Sensor + " " + e.Kind
}
