package main

import (
	"errors"
	"slices"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// One user with two sessions open at once: ending one emits its pages and
// the other open session, and removes its entry.
func TestTracker(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, Event, Summary]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.JSON[Event](), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, Event, Summary] { return &Tracker{} },
		Output: kstate.Output[string, Summary]{
			Serde: serde.JSON[Summary](),
		},
	}, kstatetest.ApplicationID("sessiontracker"))
	d.Input("ann", Event{Session: "s1", Action: "start"})
	d.Input("ann", Event{Session: "s1", Action: "view", Page: "/home"})
	d.Input("ann", Event{Session: "s2", Action: "view", Page: "/cart"}) // opens s2
	d.MustRunBatch()
	if out := d.Outputs(); len(out) != 0 {
		t.Fatalf("outputs %+v before any session ended", out)
	}
	sessions := kstatetest.MapOf(d, "ann", "sessions", state.String(), state.JSON[[]string]())
	if len(sessions) != 2 || sessions[0].Key != "s1" || !slices.Equal(sessions[0].Value, []string{"/home"}) ||
		sessions[1].Key != "s2" || !slices.Equal(sessions[1].Value, []string{"/cart"}) {
		t.Fatalf("sessions of ann %+v, want s1=[/home] s2=[/cart]", sessions)
	}

	d.Input("ann", Event{Session: "s1", Action: "view", Page: "/about"})
	d.Input("ann", Event{Session: "s1", Action: "end"})
	d.Input("ann", Event{Session: "s9", Action: "end"}) // never started: nothing
	d.MustRunBatch()
	out := d.OutputValues()
	if len(out) != 1 {
		t.Fatalf("outputs %+v, want the summary of s1", out)
	}
	if s := out[0]; s.User != "ann" || s.Session != "s1" || !slices.Equal(s.Pages, []string{"/home", "/about"}) || !slices.Equal(s.StillOpen, []string{"s2"}) {
		t.Fatalf("summary %+v, want ann s1 pages [/home /about], still open [s2]", s)
	}
	if got := kstatetest.MapOf(d, "ann", "sessions", state.String(), state.JSON[[]string]()); len(got) != 1 || got[0].Key != "s2" {
		t.Fatalf("sessions of ann after s1 ended: %+v, want only s2", got)
	}
}

// An unknown action fails the batch with an error naming the method and the user.
func TestTrackerUnknownAction(t *testing.T) {
	d := kstatetest.New(t, kstate.Topology[string, Event, Summary]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.JSON[Event](), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, Event, Summary] { return &Tracker{} },
		Output: kstate.Output[string, Summary]{
			Serde: serde.JSON[Summary](),
		},
	}, kstatetest.ApplicationID("sessiontracker"))
	d.Input("bob", Event{Session: "s1", Action: "jump"})
	err := d.RunBatch()
	var ue *kstate.UserError
	if !errors.As(err, &ue) || ue.Method != "HandleInputRows" || ue.Key != `"bob"` {
		t.Fatalf("RunBatch: %v; want a UserError from HandleInputRows of bob", err)
	}
}
