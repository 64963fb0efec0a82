// Package handle is the engine's side of processor.Handle: the Runtime
// tells the Handle which processor call is in progress and for which
// grouping key, so that state variables and timers act on that key only and
// misuse (a timer in Init, a declaration outside Init) is an error naming
// the operation.
package handle

import (
	"fmt"
	"strconv"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/processor"
)

// Phase is the processor call in progress; the engine sets it so that the
// processor.Handle can reject operations that are not allowed in that call.
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

// Config binds a Runtime to one partition's shard.
type Config struct {
	Shard    *shard.Shard
	Timers   *timers.Timers // nil in processor.NoTime mode is fine
	TimeMode processor.TimeMode
	Query    processor.QueryInfo
}

// Runtime is the engine's side of a processor.Handle: it tells the Handle which call
// is in progress and which grouping key it is for. The kstate engine creates
// one per partition task; a test of a processor can create one over a shard
// with an in-memory backend and drive the processor without Kafka.
//
// A Runtime is used by one goroutine at a time (the partition task's).
type Runtime struct {
	cfg   Config
	phase Phase
	key   []byte
	query processor.QueryInfo
}

// NewRuntime returns a Runtime in PhaseIdle.
func NewRuntime(cfg Config) *Runtime {
	return &Runtime{cfg: cfg, query: cfg.Query}
}

// processor.Handle returns the processor.Handle to pass to the processor's Init.
func (r *Runtime) Handle() processor.Handle { return handle{r} }

// SetPhase records the processor call in progress. PhaseInit turns on the
// shard's declaring mode (state variables may be created, see
// shard.Shard.SetDeclaring); every other phase turns it off.
func (r *Runtime) SetPhase(p Phase) {
	r.phase = p
	r.cfg.Shard.SetDeclaring(p == PhaseInit)
}

// Phase returns the call in progress.
func (r *Runtime) Phase() Phase { return r.phase }

// SetKey sets the grouping key (encoded) that state variables and timers
// operate on, on the processor.Handle and on the shard.
func (r *Runtime) SetKey(groupKey []byte) {
	r.key = groupKey
	r.cfg.Shard.SetCurrentKey(groupKey)
}

// ForgetKey drops the runtime's reference to the grouping key SetKey set,
// once no call of the batch runs (the shard keeps a copy). The key is often
// the polled record's own bytes, which share one fetch response with every
// record fetched with it: a task kept, until its partition's next batch, a
// whole response alive (17 of 4 MiB at 64 partitions; docs/BENCHMARKS.md,
// "Session 41").
func (r *Runtime) ForgetKey() { r.key = nil }

// SetBatchID sets processor.QueryInfo().BatchID.
func (r *Runtime) SetBatchID(id int64) { r.query.BatchID = id }

// Shard returns the shard the runtime is bound to.
func (r *Runtime) Shard() *shard.Shard { return r.cfg.Shard }

// handle is the processor-facing Handle; it hides the Runtime's engine methods.
type handle struct{ r *Runtime }

// StateShard lets processor.NewValueState and friends reach the shard.
func (h handle) StateShard() *shard.Shard { return h.r.cfg.Shard }

func (h handle) QueryInfo() processor.QueryInfo { return h.r.query }

// timerOp names a timer call in its errors. Its text is built only for an
// error: the calls are on every handler call's path.
type timerOp struct {
	name      string
	expiry    int64
	hasExpiry bool
}

func (o timerOp) String() string {
	if !o.hasExpiry {
		return o.name
	}
	return o.name + "(" + strconv.FormatInt(o.expiry, 10) + ")"
}

// timerCheck validates a timer operation against the time mode and the call
// in progress.
func (h handle) timerCheck(op timerOp) error {
	r := h.r
	if r.cfg.TimeMode == processor.NoTime || r.cfg.Timers == nil {
		return &processor.OpError{Op: op.String(), Err: processor.ErrNoTimers}
	}
	switch r.phase {
	case PhaseInput, PhaseTimer, PhaseInitialState:
		return nil
	}
	return &processor.OpError{Op: op.String() + " in " + r.phase.String(), Err: processor.ErrNoKey}
}

func (h handle) RegisterTimer(expiryMs int64) error {
	op := timerOp{"RegisterTimer", expiryMs, true}
	if err := h.timerCheck(op); err != nil {
		return err
	}
	if err := h.r.cfg.Timers.Register(h.r.key, expiryMs); err != nil {
		return &processor.OpError{Op: op.String(), Err: err}
	}
	return nil
}

func (h handle) DeleteTimer(expiryMs int64) error {
	op := timerOp{"DeleteTimer", expiryMs, true}
	if err := h.timerCheck(op); err != nil {
		return err
	}
	if err := h.r.cfg.Timers.Delete(h.r.key, expiryMs); err != nil {
		return &processor.OpError{Op: op.String(), Err: err}
	}
	return nil
}

func (h handle) ListTimers() ([]int64, error) {
	if err := h.timerCheck(timerOp{name: "ListTimers"}); err != nil {
		return nil, err
	}
	ts, err := h.r.cfg.Timers.List(h.r.key)
	if err != nil {
		return nil, &processor.OpError{Op: "ListTimers", Err: err}
	}
	return ts, nil
}

func (h handle) DeleteIfExists(name string) error {
	op := fmt.Sprintf("DeleteIfExists(%q)", name)
	if h.r.phase != PhaseInit {
		return &processor.OpError{Op: op + " in " + h.r.phase.String(), Err: processor.ErrNotInit}
	}
	if err := h.r.cfg.Shard.DeleteIfExists(name); err != nil {
		return &processor.OpError{Op: op, Err: err}
	}
	return nil
}
