package state

import (
	"iter"
	"time"
)

// ValueState holds one value of T per grouping key. Declare it in the
// processor's Init with processor.NewValueState. Every method works on the
// grouping key of the call in progress (HandleInputRows, HandleExpiredTimer,
// HandleInitialState); outside those calls it returns ErrNoBatch or ErrNoKey.
// Errors are *VarError naming the variable and the operation.
type ValueState[T any] interface {
	// Exists reports whether the key has a (non-expired) value.
	Exists() (bool, error)
	// Get returns the key's value, or ok == false when there is none
	// (never a made-up default).
	Get() (value T, ok bool, err error)
	// Update replaces the key's value (and resets its TTL). A nil pointer
	// or interface is ErrNilValue: use Clear to remove the value.
	Update(value T) error
	// Clear removes the key's value; a no-op when there is none.
	Clear() error
}

// ListState holds a list of T per grouping key, in insertion order; every
// element has its own TTL. Declare it with processor.NewListState.
type ListState[T any] interface {
	// Exists reports whether the key's list has a (non-expired) element.
	Exists() (bool, error)
	// Get returns the key's (non-expired) elements in insertion order, an
	// empty sequence when there are none. Elements are decoded eagerly, so
	// decoding errors are reported here and the sequence stays valid after
	// the call returns.
	Get() (iter.Seq[T], error)
	// Put replaces the key's list with values (all with a fresh TTL). An
	// empty list is ErrEmptyList: use Clear to remove the list.
	Put(values []T) error
	// AppendValue appends value to the key's list.
	AppendValue(value T) error
	// AppendList appends values (not empty) to the key's list.
	AppendList(values []T) error
	// Clear removes the key's list.
	Clear() error
}

// MapState holds a map from user keys UK to values V per grouping key; every
// entry has its own TTL. Iteration follows the encoded user key bytes: the
// natural order for the built-in order-preserving integer and float codecs,
// byte order for strings. Declare it with processor.NewMapState.
type MapState[UK, V any] interface {
	// Exists reports whether the key's map has a (non-expired) entry.
	Exists() (bool, error)
	// GetValue returns the value of userKey, or ok == false when absent.
	GetValue(userKey UK) (value V, ok bool, err error)
	// ContainsKey reports whether userKey has a (non-expired) entry.
	ContainsKey(userKey UK) (bool, error)
	// UpdateValue sets userKey to value (and resets that entry's TTL).
	UpdateValue(userKey UK, value V) error
	// Iterator returns the (non-expired) entries ordered by encoded user
	// key, decoded eagerly (errors are reported here).
	Iterator() (iter.Seq2[UK, V], error)
	// Keys returns the user keys in Iterator order.
	Keys() (iter.Seq[UK], error)
	// Values returns the values in Iterator order.
	Values() (iter.Seq[V], error)
	// RemoveKey removes userKey; a no-op when absent.
	RemoveKey(userKey UK) error
	// Clear removes the key's whole map.
	Clear() error
}

// Option configures a state variable at declaration.
type Option func(*Options)

// Options are the settings Options make; the engine reads them.
type Options struct {
	// TTL is the variable's time to live; meaningful when HasTTL.
	TTL time.Duration
	// HasTTL is set by WithTTL.
	HasTTL bool
	// MaxSchemaVersions is set by WithMaxSchemaVersions; 0 means the
	// default, DefaultMaxSchemaVersions.
	MaxSchemaVersions int
	// Packed is set by Packed.
	Packed bool
}

// DefaultMaxSchemaVersions is the number of schema versions a state
// variable may have unless WithMaxSchemaVersions says otherwise: Spark's
// default of spark.sql.streaming.stateStore.valueStateSchemaEvolutionThreshold.
const DefaultMaxSchemaVersions = 16

// DefaultMaxVariableSetVersions is the number of versions the set of an
// application's state variables may have unless
// kstate.Options.State.MaxVariableSetVersions says otherwise: Spark's
// default of spark.sql.streaming.stateStore.stateSchemaFilesThreshold. The
// first start that declares variables makes version 1; every later start
// that declares a new variable or drops one (DeleteIfExists) makes the next
// version, however many it adds or drops.
const DefaultMaxVariableSetVersions = 128

// WithMaxSchemaVersions sets how many schema versions (n ≥ 1) the
// variable's registry entry may hold, overriding the default of 16
// (DefaultMaxSchemaVersions; n == 0 keeps it). Declaring a schema that would be version n+1
// fails with a *SchemaChangeError wrapping ErrTooManySchemaVersions. Every
// version stays in the registry (values written under it may still be
// stored) and is resolved on reads, so the limit bounds that cost.
func WithMaxSchemaVersions(n int) Option {
	return func(o *Options) { o.MaxSchemaVersions = n }
}

// Packed keeps a grouping key's whole ListState list or MapState map as
// one stored value, written as one changelog record, instead of one entry
// per element or map entry. Every change rewrites the key's whole list or
// map, so it suits small ones: a key's last few values, a handful of
// aggregates (docs/BENCHMARKS.md measures a list of 5 and a map of 4 at
// 1.45x the unpacked layout's throughput). The API and its semantics are
// the same, but a packed list or map has no TTL (Packed with WithTTL fails
// the declaration), and its size is bounded by one record
// (Options.Kafka.MaxRecordBytes). It only applies to ListState and
// MapState. The layout is part of the stored state: declaring a variable
// packed that was stored unpacked, or the reverse, fails at start-up with
// ErrKindChanged (declare it under a new name instead).
func Packed() Option {
	return func(o *Options) { o.Packed = true }
}

// WithTTL gives every entry of the variable a time to live: it expires at
// the batch processing time of its last write plus d. It needs
// ProcessingTime mode and d ≥ 1ms.
func WithTTL(d time.Duration) Option {
	return func(o *Options) { o.TTL, o.HasTTL = d, true }
}
