package serde

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"math"
	"reflect"
)

// Serializer turns a value into the bytes of a Kafka record key or value.
type Serializer[T any] interface {
	Serialize(v T) ([]byte, error)
}

// Deserializer turns the bytes of a Kafka record key or value into a value.
type Deserializer[T any] interface {
	Deserialize(b []byte) (T, error)
}

// Serde is both a Serializer and a Deserializer of T.
type Serde[T any] interface {
	Serializer[T]
	Deserializer[T]
}

// SerializerFunc adapts a function to a Serializer.
type SerializerFunc[T any] func(T) ([]byte, error)

// Serialize returns f(v).
func (f SerializerFunc[T]) Serialize(v T) ([]byte, error) { return f(v) }

// DeserializerFunc adapts a function to a Deserializer.
type DeserializerFunc[T any] func([]byte) (T, error)

// Deserialize returns f(b).
func (f DeserializerFunc[T]) Deserialize(b []byte) (T, error) { return f(b) }

// String returns the serde of strings as UTF-8, like Kafka's
// StringSerializer and StringDeserializer (with their default UTF-8
// encoding). Bytes pass through unchanged in both directions: unlike Java,
// invalid UTF-8 is not replaced by U+FFFD, so every input round-trips. Nil
// deserializes to "".
func String() Serde[string] { return stringSerde{} }

type stringSerde struct{}

func (stringSerde) Serialize(v string) ([]byte, error)   { return []byte(v), nil }
func (stringSerde) Deserialize(b []byte) (string, error) { return string(b), nil }

// Bytes returns the serde of raw bytes, like Kafka's ByteArraySerializer.
// Serialize returns v itself, as Java does: do not modify v after handing
// the record to the engine. Deserialize returns a copy (nil stays nil),
// because the engine reuses record buffers after a batch.
func Bytes() Serde[[]byte] { return bytesSerde{} }

type bytesSerde struct{}

func (bytesSerde) Serialize(v []byte) ([]byte, error)   { return v, nil }
func (bytesSerde) Deserialize(b []byte) ([]byte, error) { return bytes.Clone(b), nil }

// Int64 returns the serde of int64 as 8 bytes, big-endian two's complement,
// like Kafka's LongSerializer. Deserialize rejects any other length,
// including nil (ErrSize).
func Int64() Serde[int64] {
	return fixed[int64]{name: "Int64", java: "LongSerializer", size: 8,
		put: func(b []byte, v int64) { binary.BigEndian.PutUint64(b, uint64(v)) },
		get: func(b []byte) (int64, error) { return int64(binary.BigEndian.Uint64(b)), nil },
	}
}

// Int32 returns the serde of int32 as 4 bytes, big-endian two's complement,
// like Kafka's IntegerSerializer. Deserialize rejects any other length,
// including nil (ErrSize).
func Int32() Serde[int32] {
	return fixed[int32]{name: "Int32", java: "IntegerSerializer", size: 4,
		put: func(b []byte, v int32) { binary.BigEndian.PutUint32(b, uint32(v)) },
		get: func(b []byte) (int32, error) { return int32(binary.BigEndian.Uint32(b)), nil },
	}
}

// Int16 returns the serde of int16 as 2 bytes, big-endian two's complement,
// like Kafka's ShortSerializer. Deserialize rejects any other length,
// including nil (ErrSize).
func Int16() Serde[int16] {
	return fixed[int16]{name: "Int16", java: "ShortSerializer", size: 2,
		put: func(b []byte, v int16) { binary.BigEndian.PutUint16(b, uint16(v)) },
		get: func(b []byte) (int16, error) { return int16(binary.BigEndian.Uint16(b)), nil },
	}
}

// Float64 returns the serde of float64 as the 8 bytes of its IEEE 754 bits,
// big-endian, like Kafka's DoubleSerializer (which uses the raw bits, so NaN
// payloads survive). Deserialize rejects any other length, including nil
// (ErrSize).
func Float64() Serde[float64] {
	return fixed[float64]{name: "Float64", java: "DoubleSerializer", size: 8,
		put: func(b []byte, v float64) { binary.BigEndian.PutUint64(b, math.Float64bits(v)) },
		get: func(b []byte) (float64, error) { return math.Float64frombits(binary.BigEndian.Uint64(b)), nil },
	}
}

// Float32 returns the serde of float32 as the 4 bytes of its IEEE 754 bits,
// big-endian, like Kafka's FloatSerializer (raw bits, NaN payloads survive).
// Deserialize rejects any other length, including nil (ErrSize).
func Float32() Serde[float32] {
	return fixed[float32]{name: "Float32", java: "FloatSerializer", size: 4,
		put: func(b []byte, v float32) { binary.BigEndian.PutUint32(b, math.Float32bits(v)) },
		get: func(b []byte) (float32, error) { return math.Float32frombits(binary.BigEndian.Uint32(b)), nil },
	}
}

// Bool returns the serde of bool as one byte, 0x01 for true and 0x00 for
// false, like Kafka's BooleanSerializer (Kafka 3.5 and later). Like
// BooleanDeserializer, Deserialize rejects any other byte and any other
// length, including nil (ErrSize).
func Bool() Serde[bool] {
	return fixed[bool]{name: "Bool", java: "BooleanSerializer", size: 1,
		put: func(b []byte, v bool) {
			if v {
				b[0] = 1
			}
		},
		get: func(b []byte) (bool, error) {
			switch b[0] {
			case 0:
				return false, nil
			case 1:
				return true, nil
			}
			return false, fmt.Errorf("byte 0x%02x, want 0x00 or 0x01 (written by Kafka's BooleanSerializer?)", b[0])
		},
	}
}

// fixed is a serde of values of a fixed size. get is only called with
// exactly size bytes.
type fixed[T any] struct {
	name, java string
	size       int
	put        func([]byte, T)
	get        func([]byte) (T, error)
}

func (f fixed[T]) Serialize(v T) ([]byte, error) {
	b := make([]byte, f.size)
	f.put(b, v)
	return b, nil
}

func (f fixed[T]) Deserialize(b []byte) (T, error) {
	if len(b) != f.size {
		var zero T
		return zero, &Error{Serde: f.name, Op: "deserialize", Err: &sizeError{got: len(b), want: f.size, java: f.java}}
	}
	v, err := f.get(b)
	if err != nil {
		return v, &Error{Serde: f.name, Op: "deserialize", Err: err}
	}
	return v, nil
}

// JSON returns the serde of T as UTF-8 JSON (encoding/json). Kafka's Java
// client has no JSON serializer; Jackson-based ones read what this writes
// and vice versa, but the bytes can differ (Go writes the double 1.0 as 1,
// and orders map keys), so do not compare JSON records byte for byte.
// Errors wrap the encoding/json error and name T, e.g. "JSON[main.Order]".
func JSON[T any]() Serde[T] {
	return jsonSerde[T]{name: "JSON[" + reflect.TypeFor[T]().String() + "]"}
}

type jsonSerde[T any] struct{ name string }

func (s jsonSerde[T]) Serialize(v T) ([]byte, error) {
	b, err := json.Marshal(v)
	if err != nil {
		return nil, &Error{Serde: s.name, Op: "serialize", Err: err}
	}
	return b, nil
}

func (s jsonSerde[T]) Deserialize(b []byte) (T, error) {
	var v T
	if err := json.Unmarshal(b, &v); err != nil {
		var zero T
		return zero, &Error{Serde: s.name, Op: "deserialize", Err: err}
	}
	return v, nil
}
