package state

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
)

// Codec turns values of T into bytes and back. Encode must be deterministic:
// MapState compares encoded keys, so equal keys must encode to equal bytes.
// Decode must not modify its argument: the bytes may be shared with the
// batch's staged state and the committed-state cache (returning a value
// that aliases them is fine as long as nobody modifies it).
//
// A Codec may also have a method AppendEncode(dst []byte, v T) ([]byte,
// error) that appends what Encode returns to dst (and returns the extended
// slice, as append does); the state layer then encodes keys and values into
// reused buffers instead of allocating a slice per call. The built-in codecs
// have it.
type Codec[T any] interface {
	Encode(T) ([]byte, error)
	Decode([]byte) (T, error)
}

// SchemaCodec is an optional capability of a Codec: a description of its
// value schema, recorded in the variable registry so a restart can detect a
// changed type. Codecs without it record an empty schema.
type SchemaCodec interface {
	Schema() string
}

// The built-in codecs. Integer and float codecs are order-preserving (their
// big-endian encodings sort like the numbers, negatives first), so a
// MapState keyed by them iterates in natural order; String is the raw bytes,
// which sort like Go strings.

// String returns the codec of strings: the raw bytes.
func String() Codec[string] { return stringCodec{} }

// Bytes returns the codec of byte slices: the raw bytes (copied on decode).
func Bytes() Codec[[]byte] { return bytesCodec{} }

// Int64 returns the order-preserving codec of int64 (8 bytes).
func Int64() Codec[int64] { return intCodec[int64]{name: "int64", size: 8} }

// Int32 returns the order-preserving codec of int32 (4 bytes).
func Int32() Codec[int32] { return intCodec[int32]{name: "int32", size: 4} }

// Int returns the order-preserving codec of int (8 bytes on every platform).
func Int() Codec[int] { return intCodec[int]{name: "int", size: 8} }

// Uint64 returns the order-preserving codec of uint64 (8 bytes big-endian).
func Uint64() Codec[uint64] { return uint64Codec{} }

// Float64 returns the order-preserving codec of float64 (8 bytes).
func Float64() Codec[float64] { return float64Codec{} }

// Float32 returns the order-preserving codec of float32 (4 bytes).
func Float32() Codec[float32] { return float32Codec{} }

// Bool returns the codec of bool: one byte, 0 or 1.
func Bool() Codec[bool] { return boolCodec{} }

// JSON returns a codec that stores T as encoding/json. It suits structs;
// as a MapState key codec it orders keys by their JSON bytes.
func JSON[T any]() Codec[T] { return jsonCodec[T]{} }

type stringCodec struct{}

func (stringCodec) Encode(v string) ([]byte, error) { return []byte(v), nil }
func (stringCodec) AppendEncode(dst []byte, v string) ([]byte, error) {
	return append(dst, v...), nil
}
func (stringCodec) Decode(b []byte) (string, error) { return string(b), nil }
func (stringCodec) Schema() string                  { return "string" }

type bytesCodec struct{}

func (bytesCodec) Encode(v []byte) ([]byte, error) { return append([]byte{}, v...), nil }
func (bytesCodec) AppendEncode(dst, v []byte) ([]byte, error) {
	return append(dst, v...), nil
}
func (bytesCodec) Decode(b []byte) ([]byte, error) { return append([]byte{}, b...), nil }
func (bytesCodec) Schema() string                  { return "bytes" }

type intCodec[T int | int32 | int64] struct {
	name string
	size int
}

func (c intCodec[T]) Encode(v T) ([]byte, error) { return c.AppendEncode(make([]byte, 0, c.size), v) }

func (c intCodec[T]) AppendEncode(dst []byte, v T) ([]byte, error) {
	if c.size == 4 {
		return binary.BigEndian.AppendUint32(dst, uint32(v)^(1<<31)), nil
	}
	return binary.BigEndian.AppendUint64(dst, uint64(v)^(1<<63)), nil
}

func (c intCodec[T]) Decode(b []byte) (T, error) {
	if len(b) != c.size {
		return 0, fmt.Errorf("state: %s codec: %d bytes, want %d", c.name, len(b), c.size)
	}
	if c.size == 4 {
		return T(int32(binary.BigEndian.Uint32(b) ^ (1 << 31))), nil
	}
	return T(int64(binary.BigEndian.Uint64(b) ^ (1 << 63))), nil
}

func (c intCodec[T]) Schema() string { return c.name }

type uint64Codec struct{}

func (uint64Codec) Encode(v uint64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(nil, v), nil
}

func (uint64Codec) AppendEncode(dst []byte, v uint64) ([]byte, error) {
	return binary.BigEndian.AppendUint64(dst, v), nil
}
func (uint64Codec) Decode(b []byte) (uint64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("state: uint64 codec: %d bytes, want 8", len(b))
	}
	return binary.BigEndian.Uint64(b), nil
}
func (uint64Codec) Schema() string { return "uint64" }

// Floats: flip all bits of negatives and only the sign bit of positives, so
// the unsigned big-endian order equals the numeric order (-Inf < ... < -0 <
// +0 < ... < +Inf; NaNs sort at the ends by their sign).

type float64Codec struct{}

func (c float64Codec) Encode(v float64) ([]byte, error) { return c.AppendEncode(nil, v) }

func (float64Codec) AppendEncode(dst []byte, v float64) ([]byte, error) {
	u := math.Float64bits(v)
	if u&(1<<63) != 0 {
		u = ^u
	} else {
		u ^= 1 << 63
	}
	return binary.BigEndian.AppendUint64(dst, u), nil
}

func (float64Codec) Decode(b []byte) (float64, error) {
	if len(b) != 8 {
		return 0, fmt.Errorf("state: float64 codec: %d bytes, want 8", len(b))
	}
	u := binary.BigEndian.Uint64(b)
	if u&(1<<63) != 0 {
		u ^= 1 << 63
	} else {
		u = ^u
	}
	return math.Float64frombits(u), nil
}

func (float64Codec) Schema() string { return "float64" }

type float32Codec struct{}

func (c float32Codec) Encode(v float32) ([]byte, error) { return c.AppendEncode(nil, v) }

func (float32Codec) AppendEncode(dst []byte, v float32) ([]byte, error) {
	u := math.Float32bits(v)
	if u&(1<<31) != 0 {
		u = ^u
	} else {
		u ^= 1 << 31
	}
	return binary.BigEndian.AppendUint32(dst, u), nil
}

func (float32Codec) Decode(b []byte) (float32, error) {
	if len(b) != 4 {
		return 0, fmt.Errorf("state: float32 codec: %d bytes, want 4", len(b))
	}
	u := binary.BigEndian.Uint32(b)
	if u&(1<<31) != 0 {
		u ^= 1 << 31
	} else {
		u = ^u
	}
	return math.Float32frombits(u), nil
}

func (float32Codec) Schema() string { return "float32" }

type boolCodec struct{}

func (boolCodec) Encode(v bool) ([]byte, error) {
	if v {
		return []byte{1}, nil
	}
	return []byte{0}, nil
}

func (boolCodec) AppendEncode(dst []byte, v bool) ([]byte, error) {
	if v {
		return append(dst, 1), nil
	}
	return append(dst, 0), nil
}

func (boolCodec) Decode(b []byte) (bool, error) {
	if len(b) != 1 || b[0] > 1 {
		return false, fmt.Errorf("state: bool codec: want one byte 0 or 1, got %x", b)
	}
	return b[0] == 1, nil
}

func (boolCodec) Schema() string { return "bool" }

type jsonCodec[T any] struct{}

func (jsonCodec[T]) Encode(v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, fmt.Errorf("state: json codec: %w", err)
	}
	return b, nil
}

func (jsonCodec[T]) Decode(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		return v, fmt.Errorf("state: json codec: decode %s: %w", reflect.TypeFor[T](), err)
	}
	return v, nil
}

// Schema names the Go type; a real schema (Avro) comes with schema evolution.
func (jsonCodec[T]) Schema() string { return "json:" + reflect.TypeFor[T]().String() }

// Widening: the integer and float codecs read values written by a
// narrower built-in codec of a variable's earlier schema version (the
// shard calls DecoderFor with that version's schema; see package doc).

// DecoderFor returns a decoder of values written under the schema writer.
func (c intCodec[T]) DecoderFor(writer string) (func([]byte) (T, error), error) {
	switch writer {
	case "int32":
		return func(b []byte) (T, error) {
			v, err := intCodec[int32]{name: "int32", size: 4}.Decode(b)
			return T(v), err
		}, nil
	case "int64", "int":
		if c.size == 8 {
			return func(b []byte) (T, error) {
				v, err := intCodec[int64]{name: writer, size: 8}.Decode(b)
				return T(v), err
			}, nil
		}
	}
	return nil, fmt.Errorf("state: %s codec cannot read values written by the %s codec", c.name, writer)
}

// DecoderFor returns a decoder of values written under the schema writer.
func (float64Codec) DecoderFor(writer string) (func([]byte) (float64, error), error) {
	if writer == "float32" {
		return func(b []byte) (float64, error) {
			v, err := float32Codec{}.Decode(b)
			return float64(v), err
		}, nil
	}
	return nil, fmt.Errorf("state: float64 codec cannot read values written by the %s codec", writer)
}
