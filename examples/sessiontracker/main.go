// Command sessiontracker tracks the browsing sessions of each user in a
// MapState keyed by session id: a user may have several sessions open at
// once (tabs, devices), each with its own entry. When a session ends its
// summary is emitted and its entry removed.
//
//	go run ./examples/sessiontracker                           # embedded Kafka
//	go run ./examples/sessiontracker --brokers localhost:9092  # your cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// Event is an input row; the record key is the user id.
type Event struct {
	Session string `json:"session"`
	Action  string `json:"action"` // "start", "view" or "end"
	Page    string `json:"page,omitempty"`
}

// Summary is an output row, emitted when a session ends.
type Summary struct {
	User      string   `json:"user"`
	Session   string   `json:"session"`
	Pages     []string `json:"pages"`
	StillOpen []string `json:"stillOpen"` // the user's other open sessions
}

// Tracker keeps, per user, one MapState entry per open session: session id
// → the pages viewed so far.
type Tracker struct {
	// Defaults supplies the no-op HandleExpiredTimer and Close it does not need.
	processor.Defaults[string, Summary]

	sessions state.MapState[string, []string]
}

func (t *Tracker) Init(h processor.Handle) (err error) {
	t.sessions, err = processor.NewMapState(h, "sessions", state.String(), state.JSON[[]string]())
	return err
}

func (t *Tracker) HandleInputRows(user string, events iter.Seq[Event], _ processor.TimerValues, out processor.Emitter[Summary]) error {
	for e := range events {
		pages, open, err := t.sessions.GetValue(e.Session)
		if err != nil {
			return err
		}
		switch e.Action {
		case "start":
			err = t.sessions.UpdateValue(e.Session, []string{})
		case "view":
			if !open { // a view without a start opens the session
				pages = []string{}
			}
			err = t.sessions.UpdateValue(e.Session, append(pages, e.Page))
		case "end":
			if !open {
				continue // an end without a session: nothing to report
			}
			err = t.end(user, e.Session, pages, out)
		default:
			err = fmt.Errorf("session %s: unknown action %q", e.Session, e.Action)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// end removes a session and emits its summary.
func (t *Tracker) end(user, session string, pages []string, out processor.Emitter[Summary]) error {
	if err := t.sessions.RemoveKey(session); err != nil {
		return err
	}
	others, err := t.sessions.Keys() // in key order
	if err != nil {
		return err
	}
	return out.Emit(Summary{User: user, Session: session, Pages: pages, StillOpen: slices.Collect(others)})
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "sessiontracker:", err)
		os.Exit(1)
	}
}

// input is the clickstream: u1 has two sessions open at once.
var input = []sandbox.Row[string, Event]{
	sandbox.KV("u1", Event{Session: "s1", Action: "start"}),
	sandbox.KV("u2", Event{Session: "s9", Action: "start"}),
	sandbox.KV("u1", Event{Session: "s1", Action: "view", Page: "home"}),
	sandbox.KV("u1", Event{Session: "s2", Action: "start"}),
	sandbox.KV("u1", Event{Session: "s2", Action: "view", Page: "help"}),
	sandbox.KV("u2", Event{Session: "s9", Action: "view", Page: "pricing"}),
	sandbox.KV("u1", Event{Session: "s1", Action: "view", Page: "cart"}),
	sandbox.KV("u1", Event{Session: "s1", Action: "end"}),
	sandbox.KV("u2", Event{Session: "s9", Action: "end"}),
	sandbox.KV("u1", Event{Session: "s2", Action: "view", Page: "faq"}),
	sandbox.KV("u1", Event{Session: "s3", Action: "view", Page: "home"}),
	sandbox.KV("u1", Event{Session: "s2", Action: "end"}),
}

// run feeds the clickstream and prints the session summaries per user.
func run(ctx context.Context, brokers []string, stateDir string, out io.Writer) (err error) {
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	events, summaries := env.Name("events"), env.Name("sessions")
	if err := env.CreateTopics(ctx, 2, events, summaries); err != nil {
		return err
	}
	app, err := kstate.New(kstate.Topology[string, Event, Summary]{
		Inputs:       kstate.Topics(serde.JSON[Event](), events),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, Event, Summary] { return &Tracker{} },
		Output: kstate.Output[string, Summary]{
			Topic: summaries,
			Serde: serde.JSON[Summary](),
		},
	}, env.Options("sessiontracker"))
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	if err := sandbox.Produce(running, env, events, serde.String(), serde.JSON[Event](), input...); err != nil {
		return err
	}
	// One summary per session end: wait for them on the output topic (the
	// processor's metrics count a row before its batch's output is visible
	// to a read_committed reader).
	ends := 0
	for _, r := range input {
		if r.Value.Action == "end" {
			ends++
		}
	}
	rows, err := sandbox.Await(running, env, summaries, serde.String(), serde.JSON[Summary](), ends)
	if err != nil {
		return err
	}
	// A user's summaries are in order (one user, one partition); users are
	// sorted for a stable story.
	slices.SortStableFunc(rows, func(a, b sandbox.Row[string, Summary]) int { return strings.Compare(a.Key, b.Key) })
	for _, r := range rows {
		s := r.Value
		open := strings.Join(s.StillOpen, ", ")
		if open == "" {
			open = "none"
		}
		views := "views"
		if len(s.Pages) == 1 {
			views = "view"
		}
		fmt.Fprintf(out, "%s  session %s ended after %d %s (%s); still open: %s\n",
			s.User, s.Session, len(s.Pages), views, strings.Join(s.Pages, ", "), open)
	}
	return nil
}
