package serde

import (
	"errors"
	"fmt"
	"strings"
)

// ErrSize is wrapped by the error of a fixed-size deserializer (Int64,
// Int32, Int16, Float64, Float32, Bool) given a number of bytes other than
// its size, including nil or empty input (a null record key or value).
var ErrSize = errors.New("serde: wrong number of bytes for a fixed-size serde")

// ErrUnavailable is wrapped by a serde error whose cause is not the
// record's bytes but a service the serde needs and cannot use: a schema
// registry that is down or refuses the credentials. Such a record is not
// undecodable: kstate stops Run with its DecodeError whatever
// OnDecodeError says, so that an outage does not skip or dead-letter good
// records; a restart once the service is back reads them again.
var ErrUnavailable = errors.New("serde: a service the serde needs is unavailable")

// Error reports a failed serialization or deserialization.
type Error struct {
	Serde string // serde name, e.g. "Int64" or "JSON[main.Order]"
	Op    string // "serialize" or "deserialize"
	Err   error
}

func (e *Error) Error() string {
	cause := "<nil>"
	if e.Err != nil {
		cause = strings.TrimPrefix(e.Err.Error(), "serde: ")
	}
	return fmt.Sprintf("serde: %s: %s: %s", e.Serde, e.Op, cause)
}

func (e *Error) Unwrap() error { return e.Err }

// sizeError is the cause of a wrong-size deserialization. It matches ErrSize
// under errors.Is but has its own message, so the serde, the sizes and a
// hint appear once, without ErrSize's text in the middle.
type sizeError struct {
	got, want int
	java      string // the matching Java serializer, for the hint
}

func (e *sizeError) Error() string {
	if e.got == 0 {
		return fmt.Sprintf("0 bytes, want %d (a null record key or value? Kafka's %s would give null; check for a tombstone before deserializing)",
			e.want, strings.Replace(e.java, "Serializer", "Deserializer", 1))
	}
	return fmt.Sprintf("%d bytes, want %d (written by Kafka's %s?)", e.got, e.want, e.java)
}

func (e *sizeError) Is(target error) bool { return target == ErrSize }
