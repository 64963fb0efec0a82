package processor

import (
	"fmt"

	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// shardOf returns the shard behind h for declaring a variable.
func shardOf(h Handle, op, name string) (*shard.Shard, error) {
	if p, ok := h.(shard.Provider); ok {
		if s := p.StateShard(); s != nil {
			return s, nil
		}
	}
	return nil, &OpError{Op: fmt.Sprintf("%s(%q)", op, name), Err: ErrForeignHandle}
}

// NewValueState declares a ValueState named name, with values encoded by
// c. Call it in Init; outside Init, for a duplicate name or with a TTL
// outside ProcessingTime mode it returns an error naming the variable.
func NewValueState[T any](h Handle, name string, c state.Codec[T], opts ...state.Option) (state.ValueState[T], error) {
	s, err := shardOf(h, "NewValueState", name)
	if err != nil {
		return nil, err
	}
	return shard.NewValueState(s, name, c, opts...)
}

// NewListState declares a ListState named name (see NewValueState).
func NewListState[T any](h Handle, name string, c state.Codec[T], opts ...state.Option) (state.ListState[T], error) {
	s, err := shardOf(h, "NewListState", name)
	if err != nil {
		return nil, err
	}
	return shard.NewListState(s, name, c, opts...)
}

// NewMapState declares a MapState named name with user keys UK (iterated in
// the order of their encoding; the built-in integer and string codecs
// preserve natural order) and values V (see NewValueState).
func NewMapState[UK, V any](h Handle, name string, kc state.Codec[UK], vc state.Codec[V], opts ...state.Option) (state.MapState[UK, V], error) {
	s, err := shardOf(h, "NewMapState", name)
	if err != nil {
		return nil, err
	}
	return shard.NewMapState(s, name, kc, vc, opts...)
}
