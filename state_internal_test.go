package kstate

import (
	"slices"
	"testing"
)

// The state machine's rules: terminal states are final, Stopping leaves
// only for Stopped or Failed, repeats are no change; the listener sees
// every change in order.
func TestStateMachineTransitions(t *testing.T) {
	var got []string
	m := newStateMachine(func(old, new State) { got = append(got, old.String()+">"+new.String()) })
	for _, s := range []State{Starting, Starting, Restoring, Running, Restoring, Running, Stopping, Running, Restoring, Stopped, Failed, Running} {
		m.set(s)
	}
	stop := make(chan struct{})
	close(stop)
	m.listen(stop)
	want := []string{"Created>Starting", "Starting>Restoring", "Restoring>Running", "Running>Restoring",
		"Restoring>Running", "Running>Stopping", "Stopping>Stopped"}
	if !slices.Equal(got, want) {
		t.Fatalf("changes\n got %v\nwant %v", got, want)
	}
	if m.mu.state != Stopped {
		t.Fatalf("state %v, want Stopped", m.mu.state)
	}
	for s, name := range map[State]string{Created: "Created", Failed: "Failed", State(42): "State(?)"} {
		if s.String() != name {
			t.Errorf("%d.String() = %q, want %q", s, s.String(), name)
		}
	}
}
