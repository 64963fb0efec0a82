package shard

import "github.com/kstate/kstate/state"

// appendEncoder is the optional capability of a state.Codec described in
// its documentation: Encode appending to dst. The built-in codecs have it.
type appendEncoder[T any] interface {
	AppendEncode(dst []byte, v T) ([]byte, error)
}

// encoder encodes with a codec, into a reused buffer when the codec can
// append: a state write then allocates nothing for its encoding.
type encoder[T any] struct {
	c   state.Codec[T]
	app appendEncoder[T] // nil when c cannot append
	buf []byte
}

func newEncoder[T any](c state.Codec[T]) encoder[T] {
	e := encoder[T]{c: c}
	e.app, _ = c.(appendEncoder[T])
	return e
}

// encode returns v's encoding, valid until the next call of encode: the
// caller copies what it keeps (putEntry and the staging layer do).
func (e *encoder[T]) encode(v T) ([]byte, error) {
	if e.app == nil {
		return e.c.Encode(v)
	}
	b, err := e.app.AppendEncode(e.buf[:0], v)
	if err != nil {
		return nil, err
	}
	e.buf = b
	return b, nil
}

// appendTo appends v's encoding to dst.
func (e *encoder[T]) appendTo(dst []byte, v T) ([]byte, error) {
	if e.app != nil {
		return e.app.AppendEncode(dst, v)
	}
	b, err := e.c.Encode(v)
	if err != nil {
		return dst, err
	}
	return append(dst, b...), nil
}
