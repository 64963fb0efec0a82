package kstate

import (
	"sync"

	"github.com/kstate/kstate/internal/engine"
)

// State is where an App is in its life (App.State, Options.Observability.OnStateChange):
//
//	Created ─Run→ Starting ─→ Restoring ⇄ Running
//	any state before Stopping ─ctx cancelled→ Stopping
//	Run returns nil → Stopped; Run returns an error → Failed
//
// A rebalance has no state of its own: newly assigned partitions restore
// (Restoring) while the others keep processing; a revoke alone leaves the
// App Running.
type State int

const (
	// Created: New returned it; Run was not called.
	Created State = iota
	// Starting: Run checks the topics and joins the group, until its
	// first poll returned.
	Starting
	// Restoring: an assigned partition is restoring its state (or restored
	// and about to resume); the others process.
	Restoring
	// Running: every assigned partition is restored and processing. An
	// instance with no partitions (more instances than partitions) is
	// Running.
	Running
	// Stopping: Run's ctx was cancelled; the batch in flight commits or
	// aborts (within ShutdownTimeout) and the tasks close.
	Stopping
	// Stopped: Run returned nil.
	Stopped
	// Failed: Run returned an error.
	Failed
)

var stateNames = [...]string{"Created", "Starting", "Restoring", "Running", "Stopping", "Stopped", "Failed"}

func (s State) String() string {
	if s < 0 || int(s) >= len(stateNames) {
		return "State(?)"
	}
	return stateNames[s]
}

// terminal reports whether s is final.
func (s State) terminal() bool { return s == Stopped || s == Failed }

// State returns the App's current state. Safe to call at any time.
func (a *App[K, I, O]) State() State {
	a.sm.mu.Lock()
	defer a.sm.mu.Unlock()
	return a.sm.mu.state
}

// stateMachine holds an App's State and delivers its changes to the
// listener in order, on one goroutine of Run's (listen), so that a slow
// listener never holds up the loop and never runs under an engine lock.
type stateMachine struct {
	listener func(old, new State)
	wake     chan struct{} // buffered 1: changes queued

	mu struct {
		sync.Mutex
		state State
		queue [][2]State
	}
}

func newStateMachine(listener func(old, new State)) *stateMachine {
	return &stateMachine{listener: listener, wake: make(chan struct{}, 1)}
}

// set moves to s if the transition is allowed: nothing leaves a terminal
// state, and Stopping leaves only for Stopped or Failed (a late phase
// report of the loop cannot undo it).
func (m *stateMachine) set(s State) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked(s)
}

func (m *stateMachine) setLocked(s State) {
	old := m.mu.state
	if s == old || old.terminal() || (old == Stopping && !s.terminal()) {
		return
	}
	m.mu.state = s
	if m.listener != nil {
		m.mu.queue = append(m.mu.queue, [2]State{old, s})
		select {
		case m.wake <- struct{}{}:
		default:
		}
	}
}

// follow maps the coordinator's phase to the State; called by its OnPhase
// hook. Reading the phase under m.mu orders concurrent calls: the last
// one reads the latest phase. (Lock order: m.mu, then the coordinator's.)
func (m *stateMachine) follow(c interface{ Phase() engine.Phase }) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.setLocked([...]State{Starting, Restoring, Running, Stopping}[c.Phase()])
}

// listen calls the listener with every change, in order, until stop is
// closed and the queue is empty.
func (m *stateMachine) listen(stop <-chan struct{}) {
	for {
		m.mu.Lock()
		q := m.mu.queue
		m.mu.queue = nil
		m.mu.Unlock()
		for _, ch := range q {
			m.listener(ch[0], ch[1])
		}
		if len(q) > 0 {
			continue
		}
		select {
		case <-m.wake:
		case <-stop:
			m.mu.Lock()
			empty := len(m.mu.queue) == 0
			m.mu.Unlock()
			if empty {
				return
			}
		}
	}
}
