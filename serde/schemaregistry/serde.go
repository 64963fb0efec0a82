package schemaregistry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"

	"github.com/kstate/kstate/serde"
)

// Options say which subject a serde's schema lives under and whether the
// serde may register it.
type Options struct {
	// Topic is the topic the serde reads or writes; with the default
	// TopicNameStrategy the subject is "<Topic>-value", or "<Topic>-key"
	// when Key is set. Required unless Subject is set.
	Topic string
	// Key makes the default subject "<Topic>-key": the serde is for
	// record keys (kstate.Topology.KeySerde). It also makes Deserialize accept only
	// records of the serde's own schema id (ErrIncompatible otherwise):
	// kstate keeps state under a key's bytes, and the same key written
	// with another schema id has other bytes, so its state would be split
	// in two without a word. Default false: record values.
	Key bool
	// Subject, when set, is the subject itself (RecordNameStrategy and
	// others: give the name they would compute), and Topic and Key are
	// not used for it. Default: TopicNameStrategy from Topic and Key.
	Subject string
	// AutoRegister makes the constructor register the schema under the
	// subject (a new version when it differs from the latest; the
	// registry checks its compatibility). Default false: the schema must
	// already be registered under the subject, and the constructor fails
	// with ErrSchemaNotFound naming subject and schema when it is not.
	// (Confluent's Java serializers default to registering; production
	// registries usually allow only a schema pipeline to register.)
	AutoRegister bool
}

func (o Options) subject() (string, error) {
	switch {
	case o.Subject != "":
		return o.Subject, nil
	case o.Topic == "":
		return "", errors.New("schemaregistry: Options.Topic or Options.Subject is required")
	case o.Key:
		return o.Topic + "-key", nil
	default:
		return o.Topic + "-value", nil
	}
}

// Serde is a record serde of T in the Confluent wire format: the magic
// byte 0, the schema id as 4 bytes big-endian, then the payload. It
// implements serde.Serde[T], so it fits kstate.Topology.KeySerde, ValueSerde,
// OutputSerde and processor.NewOutputTopic. It is safe for concurrent use.
//
// Serialize writes with the serde's own schema id (SchemaID) and calls no
// registry. Deserialize reads the id of each record and decodes with that
// (writer) schema, fetched from the registry the first time the id is seen
// and cached after: a registry call per new schema id, not per record.
//
// Errors are *serde.Error values wrapping an *Error (errors.As), which
// wraps ErrWireFormat, ErrSchemaNotFound, ErrIncompatible, ErrUnauthorized
// or ErrUnavailable (errors.Is); as a ValueSerde or KeySerde their record
// meets kstate.Topology.OnDecodeError like any undecodable record.
type Serde[T any] struct {
	name    string // e.g. "Avro[main.Order]"
	subject string
	id      int
	key     bool // Options.Key: only id is read
	client  *Client
	format  format

	mu       sync.RWMutex
	decoders map[int]decoder // by writer schema id
}

// decoder decodes a payload written with one schema id into a *T.
type decoder func(payload []byte, v any) error

// format is what differs between Avro, JSON Schema and Protobuf.
type format struct {
	typ    sr.SchemaType
	index  []int // Protobuf: the message's path in its file, written after the id
	encode func(v any) ([]byte, error)
	// decoderFor returns the decoder of payloads written with schema s.
	decoderFor func(s sr.Schema) (decoder, error)
}

// SchemaID is the id of the serde's schema under its subject: the id that
// Serialize writes.
func (s *Serde[T]) SchemaID() int { return s.id }

// Subject is the serde's subject, e.g. "orders-value".
func (s *Serde[T]) Subject() string { return s.subject }

var header sr.ConfluentHeader

// Serialize returns the wire format of v: 0, the schema id, the payload.
func (s *Serde[T]) Serialize(v T) ([]byte, error) {
	payload, err := s.format.encode(&v)
	if err != nil {
		return nil, &serde.Error{Serde: s.name, Op: "serialize", Err: err}
	}
	b, err := header.AppendEncode(make([]byte, 0, 6+len(payload)), s.id, s.format.index)
	if err != nil {
		return nil, &serde.Error{Serde: s.name, Op: "serialize", Err: err}
	}
	return append(b, payload...), nil
}

// Deserialize decodes b with the writer schema whose id b carries.
func (s *Serde[T]) Deserialize(b []byte) (T, error) {
	var v T
	if err := s.deserialize(b, &v); err != nil {
		var zero T
		return zero, &serde.Error{Serde: s.name, Op: "deserialize", Err: err}
	}
	return v, nil
}

func (s *Serde[T]) deserialize(b []byte, v *T) error {
	if len(b) < 5 || b[0] != 0 {
		return &Error{Op: "decode", Subject: s.subject, Kind: ErrWireFormat, Err: wireError(b)}
	}
	id, payload, err := header.DecodeID(b)
	if err != nil {
		return &Error{Op: "decode", Subject: s.subject, Kind: ErrWireFormat, Err: err}
	}
	if s.key && id != s.id {
		return &Error{Op: "decode", Subject: s.subject, ID: id, Kind: ErrIncompatible,
			Err: fmt.Errorf("a key serde reads only its own schema id %d: kstate keeps state under a key's bytes, and a key written with schema id %d has other bytes than the same key written with %d (its state would be split); have the producers write keys with schema id %d, or use plain keys (serde.String)", s.id, id, s.id, s.id)}
	}
	s.mu.RLock()
	dec, ok := s.decoders[id]
	s.mu.RUnlock()
	if !ok {
		if dec, err = s.decoderFor(id); err != nil {
			return err
		}
	}
	if err := dec(payload, v); err != nil {
		var e *Error
		if errors.As(err, &e) {
			e.Subject, e.ID = s.subject, id
			return e
		}
		return &Error{Op: "decode", Subject: s.subject, ID: id, Err: err}
	}
	return nil
}

// decoderFor fetches the writer schema id and builds (and caches) its
// decoder.
func (s *Serde[T]) decoderFor(id int) (decoder, error) {
	// Config.Timeout bounds the call; Deserialize has no context.
	w, err := s.client.schemaByID(context.Background(), s.subject, id)
	if err != nil {
		return nil, err
	}
	if w.Type != s.format.typ {
		return nil, &Error{Op: "decode", Subject: s.subject, ID: id, Kind: ErrIncompatible,
			Err: fmt.Errorf("the schema is of type %s, the serde reads %s", w.Type, s.format.typ)}
	}
	dec, err := s.format.decoderFor(w)
	if err != nil {
		return nil, &Error{Op: "decode", Subject: s.subject, ID: id, Kind: ErrIncompatible, Err: err}
	}
	s.mu.Lock()
	s.decoders[id] = dec
	s.mu.Unlock()
	return dec, nil
}

func wireError(b []byte) error {
	if len(b) == 0 {
		return errors.New("0 bytes (a null record value? check for a tombstone before deserializing)")
	}
	if b[0] != 0 {
		return fmt.Errorf("first byte 0x%02x, want the magic byte 0x00 (a record written without a schema registry serializer?)", b[0])
	}
	return fmt.Errorf("%d bytes, want at least 5 (magic byte and schema id)", len(b))
}

func newSerde[T any](ctx context.Context, c *Client, kind, name, schema string, o Options, f format, ownDecoder decoder) (*Serde[T], error) {
	subject, err := o.subject()
	if err != nil {
		return nil, err
	}
	if c == nil {
		return nil, errors.New("schemaregistry: nil *Client")
	}
	id, err := c.idFor(ctx, subject, name, sr.Schema{Schema: schema, Type: f.typ}, o.AutoRegister)
	if err != nil {
		return nil, err
	}
	return &Serde[T]{
		name:     kind + "[" + reflect.TypeFor[T]().String() + "]",
		subject:  subject,
		id:       id,
		key:      o.Key,
		client:   c,
		format:   f,
		decoders: map[int]decoder{id: ownDecoder},
	}, nil
}

// Avro returns the serde of T with the Avro schema given as JSON text
// (github.com/hamba/avro/v2 maps T to it: struct fields by their `avro`
// tags). The constructor looks the schema up under the subject of o (or
// registers it, with o.AutoRegister) and fails when the registry cannot be
// reached, refuses the credentials, or does not have the schema.
//
// Deserialize resolves each record's writer schema to this (reader)
// schema, the Avro rules of schema evolution: fields added with a default
// get it, removed fields are skipped, int widens to long. A writer schema
// the reader cannot read fails with ErrIncompatible.
func Avro[T any](ctx context.Context, c *Client, schema string, o Options) (*Serde[T], error) {
	reader, err := avro.ParseWithCache(schema, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("schemaregistry: parse the Avro schema %s: %w", describe(schema), err)
	}
	name := describe(schema)
	if n, ok := reader.(avro.NamedSchema); ok {
		name = fmt.Sprintf("%s %q", reader.Type(), n.FullName())
	}
	f := format{
		typ:    sr.TypeAvro,
		encode: func(v any) ([]byte, error) { return avro.Marshal(reader, v) },
		decoderFor: func(w sr.Schema) (decoder, error) {
			writer, err := avro.ParseWithCache(w.Schema, "", &avro.SchemaCache{})
			if err != nil {
				return nil, fmt.Errorf("parse the writer schema: %w", err)
			}
			resolved := reader
			if writer.Fingerprint() != reader.Fingerprint() {
				if resolved, err = avro.NewSchemaCompatibility().Resolve(reader, writer); err != nil {
					return nil, fmt.Errorf("the serde's schema %s cannot read it: %w", name, err)
				}
			}
			return func(p []byte, v any) error { return avroUnmarshal(resolved, p, v) }, nil
		},
	}
	own := func(p []byte, v any) error { return avroUnmarshal(reader, p, v) }
	return newSerde[T](ctx, c, "Avro", name, schema, o, f, own)
}

// JSONSchema returns the serde of T as JSON (encoding/json) under the JSON
// Schema given as text, registered as type JSON: what Confluent's
// KafkaJsonSchemaSerializer writes and reads. The constructor looks the
// schema up (or registers it) like Avro's. The payload is not validated
// against the schema, in either direction; Deserialize checks that the
// record's schema id exists in the registry and is a JSON Schema, and
// decodes the JSON into T whatever the version (encoding/json ignores
// unknown fields and leaves missing ones zero).
func JSONSchema[T any](ctx context.Context, c *Client, schema string, o Options) (*Serde[T], error) {
	if !json.Valid([]byte(schema)) {
		return nil, fmt.Errorf("schemaregistry: the JSON Schema %s is not valid JSON", describe(schema))
	}
	name := describe(schema)
	var meta struct {
		Title string `json:"title"`
	}
	if json.Unmarshal([]byte(schema), &meta) == nil && meta.Title != "" {
		name = fmt.Sprintf("%q", meta.Title)
	}
	dec := func(p []byte, v any) error { return json.Unmarshal(p, v) }
	f := format{
		typ:        sr.TypeJSON,
		encode:     json.Marshal,
		decoderFor: func(sr.Schema) (decoder, error) { return dec, nil },
	}
	return newSerde[T](ctx, c, "JSONSchema", name, schema, o, f, dec)
}

var avroReaders = sync.Pool{New: func() any { return avro.NewReader(nil, 0) }}

// avroUnmarshal is avro.Unmarshal, except that a payload that ends too
// soon is an error: avro.Unmarshal takes io.EOF for success and leaves
// the missing fields zero, which would turn a truncated record into a
// wrong value.
func avroUnmarshal(schema avro.Schema, p []byte, v any) error {
	r := avroReaders.Get().(*avro.Reader)
	r.Reset(p)
	r.Error = nil
	r.ReadVal(schema, v)
	err := r.Error
	r.Reset(nil)
	r.Error = nil
	avroReaders.Put(r)
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("the Avro payload ends too soon (%d bytes): %w", len(p), io.ErrUnexpectedEOF)
	}
	return err
}
