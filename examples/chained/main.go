// Command chained runs two kstate applications in a row. The first drops
// duplicate clicks per user and re-keys the rest by page; the second counts
// page views per page and event-time minute. The first sets
// Topology.Output.EventTime, so every record it writes carries the click's
// event time as its Kafka timestamp, and the second (EventTime mode, event
// time = record timestamp by default) windows by when the clicks happened,
// not by when the first application wrote them.
//
//	go run ./examples/chained                           # embedded Kafka
//	go run ./examples/chained --brokers localhost:9092  # your cluster
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Click is the first application's input row; the record key is the user.
// A client that retries may send a click twice: Seq tells.
type Click struct {
	Seq  int64  `json:"seq"` // per user, increasing
	Page string `json:"page"`
	AtMs int64  `json:"at"` // event time
}

// View is the first application's output row and the second's input row.
type View struct {
	Page string `json:"page"`
	User string `json:"user"`
	AtMs int64  `json:"at"`
}

// Dedup (NoTime) remembers the last click sequence number of each user and
// drops clicks it has seen.
type Dedup struct {
	// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
	processor.Defaults[string, View]

	lastSeq state.ValueState[int64]
}

func (d *Dedup) Init(h processor.Handle) (err error) {
	d.lastSeq, err = processor.NewValueState(h, "lastSeq", state.Int64())
	return err
}

func (d *Dedup) HandleInputRows(user string, clicks iter.Seq[Click], _ processor.TimerValues, out processor.Emitter[View]) error {
	last, _, err := d.lastSeq.Get()
	if err != nil {
		return err
	}
	for c := range clicks {
		if c.Seq <= last {
			continue // a duplicate
		}
		last = c.Seq
		if err := out.Emit(View{Page: c.Page, User: user, AtMs: c.AtMs}); err != nil {
			return err
		}
	}
	return d.lastSeq.Update(last)
}

// PageMinute is the second application's output row.
type PageMinute struct {
	Page    string `json:"page"`
	StartMs int64  `json:"start"`
	Views   int64  `json:"views"`
}

// PerMinute (EventTime) counts the views of each page per event-time
// minute, in a MapState keyed by the minute, and emits a minute when the
// watermark passes its end.
type PerMinute struct {
	// Defaults supplies the no-op Close it does not need.
	processor.Defaults[string, PageMinute]

	h     processor.Handle
	count state.MapState[int64, int64]
}

func (p *PerMinute) Init(h processor.Handle) (err error) {
	p.h = h
	p.count, err = processor.NewMapState(h, "viewsPerMinute", state.Int64(), state.Int64())
	return err
}

func (p *PerMinute) HandleInputRows(_ string, views iter.Seq[View], _ processor.TimerValues, _ processor.Emitter[PageMinute]) error {
	for v := range views {
		minute := v.AtMs - v.AtMs%time.Minute.Milliseconds()
		n, _, err := p.count.GetValue(minute)
		if err != nil {
			return err
		}
		if err := p.count.UpdateValue(minute, n+1); err != nil {
			return err
		}
		if err := p.h.RegisterTimer(minute + time.Minute.Milliseconds()); err != nil {
			return err
		}
	}
	return nil
}

func (p *PerMinute) HandleExpiredTimer(page string, _ processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[PageMinute]) error {
	minute := t.ExpiryTimeMs - time.Minute.Milliseconds()
	n, ok, err := p.count.GetValue(minute)
	if err != nil || !ok {
		return err
	}
	if err := p.count.RemoveKey(minute); err != nil {
		return err
	}
	return out.Emit(PageMinute{Page: page, StartMs: minute, Views: n})
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "chained:", err)
		os.Exit(1)
	}
}

var day = time.Date(2025, 1, 1, 12, 0, 0, 0, time.UTC)

func at(mm, ss int) int64 {
	return day.Add(time.Duration(mm)*time.Minute + time.Duration(ss)*time.Second).UnixMilli()
}

var clicks = []sandbox.Row[string, Click]{
	sandbox.KV("u1", Click{Seq: 1, Page: "home", AtMs: at(0, 5)}),
	sandbox.KV("u2", Click{Seq: 1, Page: "home", AtMs: at(0, 20)}),
	sandbox.KV("u1", Click{Seq: 2, Page: "pricing", AtMs: at(0, 40)}),
	sandbox.KV("u1", Click{Seq: 2, Page: "pricing", AtMs: at(0, 40)}), // sent twice
	sandbox.KV("u2", Click{Seq: 2, Page: "pricing", AtMs: at(1, 10)}),
	sandbox.KV("u1", Click{Seq: 3, Page: "home", AtMs: at(1, 30)}),
	sandbox.KV("u2", Click{Seq: 3, Page: "signup", AtMs: at(2, 5)}),
}

// run starts both applications, sends the clicks one by one (each through
// both applications before the next, so the story is the same on every
// run), and prints what each application wrote.
func run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	clickTopic, viewTopic, minuteTopic := env.Name("clicks"), env.Name("page-views"), env.Name("views-per-minute")
	// One partition each: the second application's watermark is per input
	// partition, and the story wants one.
	if err := env.CreateTopics(ctx, 1, clickTopic, viewTopic, minuteTopic); err != nil {
		return err
	}

	dedup, err := kstate.New(kstate.Topology[string, Click, View]{
		Inputs:       kstate.Topics(serde.JSON[Click](), clickTopic),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, Click, View] { return &Dedup{} },
		Output: kstate.Output[string, View]{
			Topic: viewTopic,
			Serde: serde.JSON[View](),
			Key:   func(_ string, v View) []byte { return []byte(v.Page) }, // re-key by page
			// The output record's timestamp is the click's event time.
			EventTime: func(v View) int64 { return v.AtMs },
		},
	}, env.Options("dedup"))
	if err != nil {
		return err
	}
	perMinute, err := kstate.New(kstate.Topology[string, View, PageMinute]{
		Inputs:       kstate.Topics(serde.JSON[View](), viewTopic),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, View, PageMinute] { return &PerMinute{} },
		TimeMode:     processor.EventTime, // Topology.EventTime nil: event time = record timestamp
		Output: kstate.Output[string, PageMinute]{
			Topic: minuteTopic,
			Serde: serde.JSON[PageMinute](),
		},
	}, env.Options("per-minute"))
	if err != nil {
		return err
	}
	running1, stop1 := sandbox.Start(ctx, dedup)
	defer func() {
		if serr := stop1(); err == nil {
			err = serr
		}
	}()
	running2, stop2 := sandbox.Start(running1, perMinute)
	defer func() {
		if serr := stop2(); err == nil {
			err = serr
		}
	}()

	for i, c := range clicks {
		if err := sandbox.Produce(running2, env, clickTopic, serde.String(), serde.JSON[Click](), c); err != nil {
			return err
		}
		n := int64(i + 1)
		if err := sandbox.Until(running2, "the click through both applications", func() bool {
			m1, m2 := dedup.Metrics().Total, perMinute.Metrics().Total
			return m1.RowsIn >= n && m2.RowsIn+m2.LateRowsDropped >= m1.RowsOut
		}); err != nil {
			return err
		}
	}

	views, err := sandbox.Read(running2, env, viewTopic, serde.String(), serde.JSON[View]())
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "dedup: %d clicks in, %d page views out (key = page, record timestamp = click time)\n", len(clicks), len(views))
	for _, v := range views {
		fmt.Fprintf(out, "  %-8s %s  timestamp %s\n", v.Key, v.Value.User, clock(v.Time.UnixMilli()))
	}
	// The last click moved the watermark past 12:02: four page-minutes
	// are closed (the ones from 12:02 on are still open).
	minutes, err := sandbox.Await(running2, env, minuteTopic, serde.String(), serde.JSON[PageMinute](), 4)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "per-minute: views per page and event-time minute, emitted when the watermark passes the minute\n")
	for _, m := range minutes {
		fmt.Fprintf(out, "  %-8s %s-%s  %d\n", m.Key, clock(m.Value.StartMs)[:5], clock(m.Value.StartMs + time.Minute.Milliseconds())[:5], m.Value.Views)
	}
	// Nothing more may come: stop both and look again.
	if err := errors.Join(stop2(), stop1()); err != nil {
		return err
	}
	if all, err := sandbox.Read(ctx, env, minuteTopic, serde.String(), serde.JSON[PageMinute]()); err != nil || len(all) != len(minutes) {
		return errors.Join(err, fmt.Errorf("chained: per-minute wrote %d records, the story expected %d", len(all), len(minutes)))
	}
	if late := perMinute.Metrics().Total.LateRowsDropped; late != 0 {
		return fmt.Errorf("chained: per-minute dropped %d rows as late", late)
	}
	return nil
}

func clock(ms int64) string { return time.UnixMilli(ms).UTC().Format(time.TimeOnly) }
