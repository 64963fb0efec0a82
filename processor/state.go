package processor

import (
	"fmt"
	"time"

	"github.com/kstate/kstate/state"
)

// ValueState, ListState and MapState are the state variable types, re-exported
// so that processor code can name them from this package.
type (
	ValueState[T any]  = state.ValueState[T]
	ListState[T any]   = state.ListState[T]
	MapState[K, V any] = state.MapState[K, V]
	Codec[T any]       = state.Codec[T]
	StateOption        = state.Option
)

// WithTTL gives a state variable a time to live (ProcessingTime mode only).
// It is state.WithTTL.
func WithTTL(d time.Duration) state.Option { return state.WithTTL(d) }

// shardOf returns the shard behind h for declaring a variable.
func shardOf(h Handle, kind, name string) (*state.Shard, error) {
	if h == nil {
		return nil, &OpError{Op: fmt.Sprintf("%s(%q)", kind, name), Err: ErrForeignHandle}
	}
	r := h.runtime()
	if r == nil || r.cfg.Shard == nil {
		return nil, &OpError{Op: fmt.Sprintf("%s(%q)", kind, name), Err: ErrForeignHandle}
	}
	return r.cfg.Shard, nil
}

// NewValueState declares a ValueState named name. Call it in Init; outside
// Init, for a duplicate name or with a TTL outside ProcessingTime mode it
// returns an error naming the variable.
func NewValueState[T any](h Handle, name string, c state.Codec[T], opts ...state.Option) (*state.ValueState[T], error) {
	s, err := shardOf(h, "NewValueState", name)
	if err != nil {
		return nil, err
	}
	return state.NewValueState(s, name, c, opts...)
}

// NewListState declares a ListState named name (see NewValueState).
func NewListState[T any](h Handle, name string, c state.Codec[T], opts ...state.Option) (*state.ListState[T], error) {
	s, err := shardOf(h, "NewListState", name)
	if err != nil {
		return nil, err
	}
	return state.NewListState(s, name, c, opts...)
}

// NewMapState declares a MapState named name with user keys K (iterated in
// the order of their encoding; the built-in integer and string codecs
// preserve natural order) and values V (see NewValueState).
func NewMapState[K, V any](h Handle, name string, kc state.Codec[K], vc state.Codec[V], opts ...state.Option) (*state.MapState[K, V], error) {
	s, err := shardOf(h, "NewMapState", name)
	if err != nil {
		return nil, err
	}
	return state.NewMapState(s, name, kc, vc, opts...)
}
