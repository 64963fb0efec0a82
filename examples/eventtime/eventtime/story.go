package eventtime

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// The story's settings.
const (
	WindowSize      = time.Minute
	AllowedLateness = 10 * time.Second
)

var day = time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)

// at is 12:mm:ss on the story's day.
func at(mm, ss int) int64 {
	return day.Add(12*time.Hour + time.Duration(mm)*time.Minute + time.Duration(ss)*time.Second).UnixMilli()
}

type reading struct {
	sensor string
	Reading
}

// step is a batch of readings sent together; the story then waits until
// they were processed, with late of them dropped, and windows emitted.
type step struct {
	readings []reading
	late     int64
	windows  int
}

var story = []step{
	{readings: []reading{{"s1", Reading{at(0, 5), 20.0}}, {"s2", Reading{at(0, 30), 18.0}}, {"s1", Reading{at(0, 40), 21.0}}}},
	{readings: []reading{{"s1", Reading{at(0, 35), 21.5}}, {"s2", Reading{at(1, 2), 19.0}}}}, // 12:00:35 is out of order, but not late
	{readings: []reading{{"s1", Reading{at(1, 15), 22.0}}}, windows: 2},
	{readings: []reading{{"s2", Reading{at(0, 58), 30.0}}}, late: 1},
	{readings: []reading{{"s1", Reading{at(1, 40), 23.0}}}},
	{readings: []reading{{"s1", Reading{at(2, 20), 22.5}}}, windows: 2},
}

// Run runs the window processor on the Kafka cluster at brokers (an
// embedded one when empty) and tells the story of two sensors on out.
func Run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	in, windows := env.Name("readings"), env.Name("windows")
	// One partition: the watermark is per input partition, and the story
	// wants one watermark for both sensors.
	if err := env.CreateTopics(ctx, 1, in, windows); err != nil {
		return err
	}

	app, err := kstate.New(kstate.Topology[string, Reading, Window]{
		Inputs:          kstate.Topics(serde.JSON[Reading](), in),
		KeySerde:        serde.String(),
		NewProcessor:    NewWindows(WindowSize),
		TimeMode:        processor.EventTime,
		EventTime:       EventTime,
		AllowedLateness: AllowedLateness,
		Output: kstate.Output[string, Window]{
			Topic: windows,
			Serde: serde.JSON[Window](),
			// A window's result is stamped with the window's end, so a
			// downstream kstate application sees it at the right event time.
			EventTime: func(w Window) int64 { return w.EndMs },
		},
	}, env.Options("eventtime"))
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	fmt.Fprintf(out, "tumbling windows of %v per sensor; watermark = max event time seen - %v\n\n",
		strings.TrimSuffix(WindowSize.String(), "0s"), AllowedLateness)
	tail := sandbox.NewTail(env, windows, serde.String(), serde.JSON[Window]())
	var sent int64
	for _, s := range story {
		rows := make([]sandbox.Row[string, Reading], len(s.readings))
		var line []string
		for i, r := range s.readings {
			rows[i] = sandbox.KV(r.sensor, r.Reading)
			line = append(line, fmt.Sprintf("%s %s %.1f°C", r.sensor, clock(r.AtMs), r.Celsius))
		}
		late := app.Metrics().Total.LateRowsDropped
		if err := sandbox.Produce(running, env, in, serde.String(), serde.JSON[Reading](), rows...); err != nil {
			return err
		}
		sent += int64(len(rows))
		if err := sandbox.Until(running, fmt.Sprintf("%d readings processed or dropped", sent), func() bool {
			m := app.Metrics().Total
			return m.RowsIn+m.LateRowsDropped >= sent
		}); err != nil {
			return err
		}
		fmt.Fprintf(out, "in    %s\n", strings.Join(line, ", "))
		if d := app.Metrics().Total.LateRowsDropped - late; d != s.late {
			return fmt.Errorf("eventtime: %d rows dropped as late, want %d", d, s.late)
		} else if d > 0 {
			fmt.Fprintf(out, "late  dropped and counted: its event time is at or before the watermark\n")
		}
		got, err := tail.Next(running, s.windows)
		if err != nil {
			return err
		}
		for _, w := range got {
			fmt.Fprintf(out, "out   %s\n", w.Value)
		}
	}
	if err := stop(); err != nil {
		return err
	}
	if extra, err := tail.Next(ctx, 0); err != nil || len(extra) > 0 {
		return errors.Join(err, fmt.Errorf("eventtime: unexpected windows: %v", extra))
	}
	m := app.Metrics().Total
	fmt.Fprintf(out, "\n%d readings in, %d dropped as late, %d windows out; windows from 12:02 on are still open\n",
		m.RowsIn, m.LateRowsDropped, m.RowsOut)
	return nil
}

func clock(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.TimeOnly) }

// String formats a window for the story.
func (w Window) String() string {
	readings := "readings"
	if w.Count == 1 {
		readings = "reading"
	}
	return fmt.Sprintf("%s window %s-%s: %d %s, avg %.1f°C, max %.1f°C (closed at watermark %s)",
		w.Sensor, clock(w.StartMs)[:5], clock(w.EndMs)[:5], w.Count, readings, w.Avg, w.Max, clock(w.WatermarkMs))
}
