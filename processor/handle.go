package processor

import (
	"fmt"

	"github.com/kstate/kstate/state"
	"github.com/kstate/kstate/timers"
)

// Handle is the processor's view of its partition task. It is passed to Init;
// a processor keeps it to use timers and QueryInfo in later calls. State
// variables are created with NewValueState, NewListState and NewMapState.
//
// Handle is implemented only by this package (see NewRuntime).
type Handle interface {
	// RegisterTimer registers a timer for the current grouping key at
	// expiryMs. Registering an existing timer is a no-op. A timer in the
	// past registered in HandleInputRows or HandleInitialState fires in the
	// same batch.
	RegisterTimer(expiryMs int64) error
	// DeleteTimer deletes the current key's timer at expiryMs; a no-op when absent.
	DeleteTimer(expiryMs int64) error
	// ListTimers returns the current key's timers in ascending order.
	ListTimers() ([]int64, error)
	// QueryInfo identifies the application, run, batch and partition.
	QueryInfo() QueryInfo
	// DeleteIfExists drops the state variable name and all its data (Init only).
	DeleteIfExists(stateName string) error

	runtime() *Runtime
}

// Phase is the processor call in progress; the engine sets it so that the
// Handle can reject operations that are not allowed in that call.
type Phase int

const (
	// PhaseIdle: no processor call in progress (also during Close).
	PhaseIdle Phase = iota
	// PhaseInit: Init; state variables may be declared.
	PhaseInit
	// PhaseInput: HandleInputRows.
	PhaseInput
	// PhaseTimer: HandleExpiredTimer.
	PhaseTimer
	// PhaseInitialState: HandleInitialState.
	PhaseInitialState
)

func (p Phase) String() string {
	switch p {
	case PhaseIdle:
		return "idle"
	case PhaseInit:
		return "Init"
	case PhaseInput:
		return "HandleInputRows"
	case PhaseTimer:
		return "HandleExpiredTimer"
	case PhaseInitialState:
		return "HandleInitialState"
	}
	return fmt.Sprintf("Phase(%d)", int(p))
}

// RuntimeConfig binds a Runtime to one partition's shard.
type RuntimeConfig struct {
	Shard    *state.Shard
	Timers   *timers.Timers // nil in NoTime mode is fine
	TimeMode TimeMode
	Query    QueryInfo
}

// Runtime is the engine's side of a Handle: it tells the Handle which call
// is in progress and which grouping key it is for. The kstate engine creates
// one per partition task; a test of a processor can create one over a shard
// with an in-memory backend and drive the processor without Kafka.
//
// A Runtime is used by one goroutine at a time (the partition task's).
type Runtime struct {
	cfg   RuntimeConfig
	phase Phase
	key   []byte
	query QueryInfo
}

// NewRuntime returns a Runtime in PhaseIdle.
func NewRuntime(cfg RuntimeConfig) *Runtime {
	return &Runtime{cfg: cfg, query: cfg.Query}
}

// Handle returns the Handle to pass to the processor's Init.
func (r *Runtime) Handle() Handle { return handle{r} }

// SetPhase records the processor call in progress. PhaseInit turns on the
// shard's declaring mode (state variables may be created, see
// state.Shard.SetDeclaring); every other phase turns it off.
func (r *Runtime) SetPhase(p Phase) {
	r.phase = p
	r.cfg.Shard.SetDeclaring(p == PhaseInit)
}

// Phase returns the call in progress.
func (r *Runtime) Phase() Phase { return r.phase }

// SetKey sets the grouping key (encoded) that state variables and timers
// operate on, on the Handle and on the shard.
func (r *Runtime) SetKey(groupKey []byte) {
	r.key = groupKey
	r.cfg.Shard.SetCurrentKey(groupKey)
}

// SetBatchID sets QueryInfo().BatchID.
func (r *Runtime) SetBatchID(id int64) { r.query.BatchID = id }

// Shard returns the shard the runtime is bound to.
func (r *Runtime) Shard() *state.Shard { return r.cfg.Shard }

// handle is the processor-facing Handle; it hides the Runtime's engine methods.
type handle struct{ r *Runtime }

func (h handle) runtime() *Runtime { return h.r }

func (h handle) QueryInfo() QueryInfo { return h.r.query }

// timerCheck validates a timer operation against the time mode and the call
// in progress.
func (h handle) timerCheck(op string) error {
	r := h.r
	if r.cfg.TimeMode == NoTime || r.cfg.Timers == nil {
		return &OpError{Op: op, Err: ErrNoTimers}
	}
	switch r.phase {
	case PhaseInput, PhaseTimer, PhaseInitialState:
		return nil
	}
	return &OpError{Op: op + " in " + r.phase.String(), Err: ErrNoKey}
}

func (h handle) RegisterTimer(expiryMs int64) error {
	op := fmt.Sprintf("RegisterTimer(%d)", expiryMs)
	if err := h.timerCheck(op); err != nil {
		return err
	}
	if err := h.r.cfg.Timers.Register(h.r.key, expiryMs); err != nil {
		return &OpError{Op: op, Err: err}
	}
	return nil
}

func (h handle) DeleteTimer(expiryMs int64) error {
	op := fmt.Sprintf("DeleteTimer(%d)", expiryMs)
	if err := h.timerCheck(op); err != nil {
		return err
	}
	if err := h.r.cfg.Timers.Delete(h.r.key, expiryMs); err != nil {
		return &OpError{Op: op, Err: err}
	}
	return nil
}

func (h handle) ListTimers() ([]int64, error) {
	if err := h.timerCheck("ListTimers"); err != nil {
		return nil, err
	}
	ts, err := h.r.cfg.Timers.List(h.r.key)
	if err != nil {
		return nil, &OpError{Op: "ListTimers", Err: err}
	}
	return ts, nil
}

func (h handle) DeleteIfExists(name string) error {
	op := fmt.Sprintf("DeleteIfExists(%q)", name)
	if h.r.phase != PhaseInit {
		return &OpError{Op: op + " in " + h.r.phase.String(), Err: ErrNotInit}
	}
	if err := h.r.cfg.Shard.DeleteIfExists(name); err != nil {
		return &OpError{Op: op, Err: err}
	}
	return nil
}
