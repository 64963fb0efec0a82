package schemaregistry

import (
	"errors"
	"fmt"

	"github.com/kstate/kstate/serde"
)

var (
	// ErrWireFormat is wrapped by the error of a record that is not in the
	// Confluent wire format: fewer than 5 bytes, or a first byte other
	// than 0 (the magic byte).
	ErrWireFormat = errors.New("schemaregistry: not the Confluent wire format")
	// ErrSchemaNotFound is wrapped when the registry does not have what
	// was asked for: a record's schema id, or (AutoRegister off) the
	// serde's schema under its subject.
	ErrSchemaNotFound = errors.New("schemaregistry: schema not found")
	// ErrIncompatible is wrapped when a schema cannot be used: a writer
	// schema that the reader schema cannot read (Avro resolution), a
	// schema id of another type (a Protobuf schema for an Avro serde), or
	// a registration the registry refused as incompatible (409).
	ErrIncompatible = errors.New("schemaregistry: incompatible schema")
	// ErrUnauthorized is wrapped when the registry refuses the credentials
	// (HTTP 401 or 403).
	ErrUnauthorized = errors.New("schemaregistry: unauthorized")
	// ErrUnavailable is wrapped when the registry cannot be reached or
	// fails (a connection error, a timeout, HTTP 5xx).
	ErrUnavailable = errors.New("schemaregistry: registry unavailable")
)

// Error is the error of a registry call or of a record's schema: it names
// the subject (and so the topic) and the schema id when known. It wraps
// one of the sentinels above and the cause.
type Error struct {
	Op      string // e.g. "register", "look up", "get schema by id", "decode"
	Subject string // the serde's subject, e.g. "orders-value"
	ID      int    // the schema id, 0 when none is involved
	Kind    error  // ErrWireFormat, ErrSchemaNotFound, ErrIncompatible, ErrUnauthorized or ErrUnavailable
	Err     error  // the cause
}

func (e *Error) Error() string {
	s := "schemaregistry: " + e.Op
	if e.ID != 0 {
		s += fmt.Sprintf(" schema id %d", e.ID)
	}
	if e.Subject != "" {
		s += fmt.Sprintf(" (subject %q)", e.Subject)
	}
	kind := "error"
	if e.Kind != nil {
		kind = e.Kind.Error()[len("schemaregistry: "):]
	}
	if e.Err == nil {
		return s + ": " + kind
	}
	return s + ": " + kind + ": " + e.Err.Error()
}

// Unwrap gives the sentinel (Kind) and the cause, and for ErrUnavailable
// and ErrUnauthorized also serde.ErrUnavailable: the registry, not the
// record, is at fault, so kstate stops Run instead of applying
// OnDecodeError's Skip or DeadLetter to the record.
func (e *Error) Unwrap() []error {
	var errs []error
	if e.Kind != nil {
		errs = append(errs, e.Kind)
	}
	if e.Kind == ErrUnavailable || e.Kind == ErrUnauthorized {
		errs = append(errs, serde.ErrUnavailable)
	}
	if e.Err != nil {
		errs = append(errs, e.Err)
	}
	return errs
}
