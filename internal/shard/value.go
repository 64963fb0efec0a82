package shard

import (
	"github.com/kstate/kstate/state"
)

// ValueState holds one value of T per grouping key.
type valueState[T any] struct {
	varBase
	c       state.Codec[T]
	enc     encoder[T]
	dec     *decoder[T]
	nilable bool
}

// NewValueState declares a ValueState (only during Init).
func NewValueState[T any](s *Shard, name string, c state.Codec[T], opts ...state.Option) (state.ValueState[T], error) {
	b, err := s.declare("ValueState", kindValue, name, schemaOf(c), "", []any{c}, opts)
	if err != nil {
		return nil, err
	}
	return &valueState[T]{varBase: b, c: c, enc: newEncoder(c), dec: newDecoder(name, c, b.schemas, b.schemaID), nilable: nilable[T]()}, nil
}

// key is the current grouping key's entry (in v's reused key buffer).
func (v *valueState[T]) key() []byte { return v.stateKey(nil) }

// Exists reports whether the current key has a (non-expired) value.
func (v *valueState[T]) Exists() (bool, error) {
	if err := v.check("Exists", false); err != nil {
		return false, err
	}
	_, _, ok, err := v.s.readLive(v.key())
	return ok, v.err("Exists", err)
}

// Get returns the current key's value, or ok=false when there is none.
func (v *valueState[T]) Get() (T, bool, error) {
	var zero T
	if err := v.check("Get", false); err != nil {
		return zero, false, err
	}
	h, p, ok, err := v.s.readLive(v.key())
	if err != nil || !ok {
		return zero, false, v.err("Get", err)
	}
	val, err := v.dec.decode(h, p)
	if err != nil {
		return zero, false, v.err("Get", err)
	}
	return val, true, nil
}

// Update replaces the current key's value (and resets its TTL).
func (v *valueState[T]) Update(val T) error {
	if err := v.check("Update", true); err != nil {
		return err
	}
	if v.nilable && isNil(val) {
		return v.err("Update", state.ErrNilValue)
	}
	p, err := v.enc.encode(val) // putEntry copies it
	if err != nil {
		return v.err("Update", err)
	}
	exp, err := v.newExpiry()
	if err != nil {
		return v.err("Update", err)
	}
	return v.err("Update", v.s.putEntry(v.key(), p, v.schemaID, exp, v.ttl != 0))
}

// Clear removes the current key's value; a no-op when there is none.
func (v *valueState[T]) Clear() error {
	if err := v.check("Clear", true); err != nil {
		return err
	}
	key := v.key()
	old, ok, err := v.s.get(key)
	if err != nil || !ok {
		return v.err("Clear", err)
	}
	if err := v.s.deleteEntry(key, old); err != nil {
		return v.err("Clear", err)
	}
	v.s.batchStats.RowsRemoved++
	return nil
}
