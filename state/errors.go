package state

import (
	"errors"
	"fmt"
	"strings"
)

var (
	// ErrClosed is returned by every operation on a closed shard.
	ErrClosed = errors.New("state: shard is closed")
	// ErrEmptyList is returned by ListState.Put and AppendList for an empty list
	// (use Clear to remove a list).
	ErrEmptyList = errors.New("state: empty list (use Clear to remove the list)")
	// ErrNilValue is returned when a nil pointer or interface is stored.
	ErrNilValue = errors.New("state: nil value (use Clear or RemoveKey to remove state)")
	// ErrNotDeclaring is returned when a state variable is declared (or
	// dropped) outside the processor's Init.
	ErrNotDeclaring = errors.New("state: state variables can only be declared or dropped in Init")
	// ErrDuplicate is returned when one Init declares the same name twice.
	ErrDuplicate = errors.New("state: state variable declared twice in Init")
	// ErrTTLNotAllowed is returned for a TTL outside ProcessingTime mode.
	ErrTTLNotAllowed = errors.New("state: TTL requires ProcessingTime mode")
	// ErrBadTTL is returned for a TTL shorter than one millisecond.
	ErrBadTTL = errors.New("state: TTL must be positive (at least 1ms)")
	// ErrKindChanged is returned when a variable is re-declared with another
	// kind (value, list, map) than it has in the shard.
	ErrKindChanged = errors.New("state: state variable kind changed across restarts")
	// ErrNoBatch is returned by a state operation outside Begin..Commit/Abort.
	ErrNoBatch = errors.New("state: no batch in progress (state is only accessible while the engine processes a batch)")
	// ErrNoKey is returned by a state operation before SetCurrentKey.
	ErrNoKey = errors.New("state: no current grouping key")
	// ErrLocked is returned by OpenShard when another process holds the shard directory.
	ErrLocked = errors.New("state: shard directory is locked")
	// ErrBackendMismatch is returned by OpenShard when the shard directory
	// holds a store of another backend than the one configured
	// (kstate.Options.State.Backend); the message names both.
	ErrBackendMismatch = errors.New("state: shard directory holds a store of another backend")
	// ErrCorrupt is returned for a stored value that cannot be decoded.
	ErrCorrupt = errors.New("state: corrupt stored value")
)

// VarError reports a failed operation on a state variable (or, with Var
// empty, on the shard or timers themselves).
type VarError struct {
	Kind string // "ValueState", "ListState", "MapState", "Shard", "Timers"
	Var  string // state variable name; empty for shard-level operations
	Op   string // operation, e.g. "Update", "declare"
	Err  error
}

func (e *VarError) Error() string {
	cause := "<nil>"
	if e.Err != nil {
		cause = strings.TrimPrefix(e.Err.Error(), "state: ")
	}
	if e.Var == "" {
		return fmt.Sprintf("state: %s: %s: %s", e.Kind, e.Op, cause)
	}
	return fmt.Sprintf("state: %s %q: %s: %s", e.Kind, e.Var, e.Op, cause)
}

func (e *VarError) Unwrap() error { return e.Err }

// Schema evolution errors, wrapped by *SchemaChangeError.
var (
	// ErrSchemaIncompatible: the schema a variable is declared with cannot
	// read the values written under an earlier one (narrowing, a type
	// change, a changed MapState key schema).
	ErrSchemaIncompatible = errors.New("state: incompatible state schema change")
	// ErrTooManySchemaVersions: the variable already has the maximum number
	// of schema versions (WithMaxSchemaVersions).
	ErrTooManySchemaVersions = errors.New("state: too many schema versions")
	// ErrTTLChanged: a variable declared without a TTL is now declared
	// with one (WithTTL), or the reverse. Whether entries expire is part of
	// the variable's schema, as in Spark (a variable with a TTL stores an
	// expiry with every value); the duration itself may change.
	ErrTTLChanged = errors.New("state: TTL added to or removed from a state variable")
	// ErrTooManyVariableSetVersions: a start would add or drop a state
	// variable although the set of variables already had the maximum
	// number of versions (kstate.Options.State.MaxVariableSetVersions,
	// DefaultMaxVariableSetVersions), like Spark's
	// STATE_STORE_STATE_SCHEMA_FILES_THRESHOLD_EXCEEDED.
	ErrTooManyVariableSetVersions = errors.New("state: too many versions of the set of state variables")
)

// SchemaChangeError refuses a state variable declared with a schema that
// cannot replace the one in the registry. It is returned by the
// declaration in Init, so the application fails at start-up, before any
// batch, and nothing is written. Err is ErrSchemaIncompatible,
// ErrTooManySchemaVersions or ErrTTLChanged (then Old and New are the TTL
// settings, "no TTL" or "TTL 1h0m0s").
type SchemaChangeError struct {
	Variable string
	Key      bool   // the MapState user key schema (else the value schema)
	Old      string // the registry's schema version it conflicts with (the newest, for too many versions)
	New      string // the schema declared now
	Reason   string // what is incompatible, e.g. "field count: narrowing long → int"
	Err      error
}

func (e *SchemaChangeError) Error() string {
	what := "value schema"
	if e.Key {
		what = "map key schema"
	}
	hint := "keep a compatible type, or declare the new type under a new variable name (drop the old one with DeleteIfExists in Init)"
	switch {
	case errors.Is(e.Err, ErrTooManySchemaVersions):
		hint = "raise the limit with state.WithMaxSchemaVersions, or move the state to a new variable name"
	case errors.Is(e.Err, ErrTTLChanged):
		return fmt.Sprintf("state: variable %q: TTL change refused: %s; stored with %s, now declared with %s "+
			"(declare it as before — a TTL's duration may change, its presence may not — or declare the variable under a new name "+
			"and drop the old one with DeleteIfExists in Init)", e.Variable, e.Reason, e.Old, e.New)
	}
	return fmt.Sprintf("state: variable %q: %s change refused: %s; old schema %s; new schema %s (%s)",
		e.Variable, what, e.Reason, e.Old, e.New, hint)
}

func (e *SchemaChangeError) Unwrap() error { return e.Err }
