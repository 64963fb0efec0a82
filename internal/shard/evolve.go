package shard

import (
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/state"
)

// Schema evolution.
//
// A variable's registry entry keeps every value schema it was declared
// with (Schemas; version n is Schemas[n-1]) and the version of the schema
// declared now (SchemaID). Every value written carries SchemaID in its
// header; a read decodes a value of another version with a decoder that
// resolves the writer's schema to the codec's (evolver.DecoderFor), cached
// per version. A value with schema id 0 was written before the registry
// kept a history (or by a codec without a schema): it is read as version 1
// when there is a history, else with the codec as it is.
//
// What may change between versions depends on the schema's family:
//   - Avro ("avro:" + JSON): Spark's rules, checked against every version
//     (avroCompatible);
//   - the built-in primitive codecs: widening only (int32 → int64 or int,
//     int64 ↔ int, float32 → float64);
//   - JSON ("json:" + Go type): any change, nothing checked (encoding/json
//     tolerates added and removed fields);
//   - no schema (a codec without state.SchemaCodec): nothing checked, and
//     no history is kept;
//   - a custom codec's schema: no change (kstate cannot check it);
//   - between families: refused.
// A MapState key schema may never change: keys are compared as encoded
// bytes, so a key written under another schema would be another key.

// evolver is implemented by the codecs of package state that can read
// values written under an earlier schema version (Avro, and the primitives
// that widen).
type evolver[T any] interface {
	DecoderFor(writer string) (func([]byte) (T, error), error)
}

// schemaErrorer is implemented by codecs that can fail to build (Avro of a
// type without an Avro schema).
type schemaErrorer interface {
	SchemaError() error
}

// normalize fills the history of an entry written before the registry kept
// one: its schema is version 1.
func (e *registryEntry) normalize() {
	if len(e.Schemas) == 0 && e.Schema != "" {
		e.Schemas = []string{e.Schema}
		e.SchemaID = 1
	}
}

// evolveSchemas returns the history and current version of a variable
// whose entry is old (normalized) and that is declared with schema now.
func evolveSchemas(name string, old registryEntry, schema string, maxVersions int) ([]string, uint32, error) {
	if schema == "" {
		return nil, 0, nil // no schema: nothing checked, no history
	}
	if len(old.Schemas) == 0 {
		return []string{schema}, 1, nil
	}
	if int(old.SchemaID) >= 1 && int(old.SchemaID) <= len(old.Schemas) && old.Schemas[old.SchemaID-1] == schema {
		return old.Schemas, old.SchemaID, nil
	}
	newest := old.Schemas[len(old.Schemas)-1]
	for _, w := range old.Schemas {
		if w == schema {
			continue
		}
		if reason := compatible(w, schema); reason != "" {
			return nil, 0, &state.SchemaChangeError{Variable: name, Old: w, New: schema, Reason: reason, Err: state.ErrSchemaIncompatible}
		}
	}
	if i := slices.Index(old.Schemas, schema); i >= 0 {
		return old.Schemas, uint32(i + 1), nil // back to an earlier version (a rollback)
	}
	if len(old.Schemas) >= maxVersions {
		return nil, 0, &state.SchemaChangeError{Variable: name, Old: newest, New: schema,
			Reason: fmt.Sprintf("the variable has %d schema versions, the maximum", len(old.Schemas)), Err: state.ErrTooManySchemaVersions}
	}
	out := append(slices.Clip(old.Schemas), schema)
	return out, uint32(len(out)), nil
}

// checkKeySchema refuses a changed MapState key schema.
func checkKeySchema(name, old, now string) error {
	if old == "" || now == "" || old == now {
		return nil
	}
	return &state.SchemaChangeError{Variable: name, Key: true, Old: old, New: now,
		Reason: "MapState keys are compared as encoded bytes, so their schema cannot change", Err: state.ErrSchemaIncompatible}
}

// checkTTL refuses a variable that gains or loses its TTL across a restart
// (Spark fails the query: a TTL changes the variable's value schema, which
// then carries an expiry). The duration may change: entries keep the expiry
// they were written with, and new writes take the new duration.
//
// An entry's "ttlMs" has been in the registry since the registry exists
// (absent: no TTL), so a shard written by an earlier release is checked
// against what it recorded last; an earlier release accepted such a change,
// so a registry may record a TTL added by it: that is the setting kept.
func checkTTL(name string, oldMs, newMs int64) error {
	if (oldMs == 0) == (newMs == 0) {
		return nil
	}
	setting := func(ms int64) string {
		if ms == 0 {
			return "no TTL"
		}
		return "TTL " + time.Duration(ms*int64(time.Millisecond)).String()
	}
	reason := "entries written without an expiry would never expire"
	if newMs == 0 {
		reason = "entries written with an expiry would still expire"
	}
	return &state.SchemaChangeError{Variable: name, Old: setting(oldMs), New: setting(newMs),
		Reason: "whether a variable's entries expire is part of its schema: " + reason, Err: state.ErrTTLChanged}
}

// primitive widenings: writer schema → reader schemas it may become.
var widenings = map[string][]string{
	"int32":   {"int64", "int"},
	"int64":   {"int"},
	"int":     {"int64"},
	"float32": {"float64"},
}

var narrowings = map[string][]string{
	"int64":   {"int32"},
	"int":     {"int32"},
	"float64": {"float32"},
}

// compatible returns why values written under writer cannot be read with
// reader, or "" when they can.
func compatible(writer, reader string) string {
	wf, rf := family(writer), family(reader)
	switch {
	case strings.HasPrefix(wf, "custom") || strings.HasPrefix(rf, "custom"):
		return fmt.Sprintf("a custom codec's schema changed from %s to %s, and kstate cannot tell whether the new codec reads the stored values (keep Schema() stable while the encoding is)", writer, reader)
	case wf != rf:
		return fmt.Sprintf("codec changed from %s to %s (the stored bytes cannot be read by the new codec)", wf, rf)
	case wf == "json":
		return ""
	case wf == "avro":
		return avroCompatible(writer, reader)
	case slices.Contains(widenings[writer], reader):
		return ""
	case slices.Contains(narrowings[writer], reader):
		return fmt.Sprintf("narrowing %s → %s", writer, reader)
	}
	return fmt.Sprintf("type changed from %s to %s", writer, reader)
}

func family(schema string) string {
	switch {
	case strings.HasPrefix(schema, state.AvroSchemaPrefix):
		return "avro"
	case strings.HasPrefix(schema, "json:"):
		return "json"
	}
	if _, ok := widenings[schema]; ok || schema == "float64" || slices.Contains([]string{"string", "bytes", "bool", "uint64"}, schema) {
		return "primitive"
	}
	return "custom codec " + schema
}

func avroCompatible(writer, reader string) string {
	ws, err := avro.ParseWithCache(strings.TrimPrefix(writer, state.AvroSchemaPrefix), "", &avro.SchemaCache{})
	if err != nil {
		return fmt.Sprintf("stored schema does not parse: %v", err)
	}
	rs, err := avro.ParseWithCache(strings.TrimPrefix(reader, state.AvroSchemaPrefix), "", &avro.SchemaCache{})
	if err != nil {
		return fmt.Sprintf("new schema does not parse: %v", err)
	}
	if reason := avroCheck(ws, rs, ""); reason != "" {
		return reason
	}
	if err := avro.NewSchemaCompatibility().Compatible(rs, ws); err != nil {
		return err.Error()
	}
	return ""
}

// avroCheck applies Spark's rules, stricter than Avro's own resolution
// (which also promotes int → float, long → double, string ↔ bytes and
// value → union): only int → long and float → double widen.
func avroCheck(w, r avro.Schema, path string) string {
	if w.Type() == avro.Ref {
		w = w.(*avro.RefSchema).Schema()
	}
	if r.Type() == avro.Ref {
		r = r.(*avro.RefSchema).Schema()
	}
	at := func() string {
		if path == "" {
			return ""
		}
		return "field " + path + ": "
	}
	wt, rt := w.Type(), r.Type()
	if wt != rt {
		switch {
		case wt == avro.Int && rt == avro.Long, wt == avro.Float && rt == avro.Double:
			return ""
		case wt == avro.Long && rt == avro.Int, wt == avro.Double && rt == avro.Float:
			return fmt.Sprintf("%snarrowing %s → %s", at(), wt, rt)
		}
		return fmt.Sprintf("%stype changed from %s to %s", at(), typeName(w), typeName(r))
	}
	join := func(name string) string {
		if path == "" {
			return name
		}
		return path + "." + name
	}
	switch rt {
	case avro.Record:
		wr := w.(*avro.RecordSchema)
		for _, rf := range r.(*avro.RecordSchema).Fields() {
			for _, wf := range wr.Fields() {
				if wf.Name() == rf.Name() {
					if reason := avroCheck(wf.Type(), rf.Type(), join(rf.Name())); reason != "" {
						return reason
					}
				}
			}
		}
	case avro.Array:
		return avroCheck(w.(*avro.ArraySchema).Items(), r.(*avro.ArraySchema).Items(), join("[]"))
	case avro.Map:
		return avroCheck(w.(*avro.MapSchema).Values(), r.(*avro.MapSchema).Values(), join("{}"))
	case avro.Union:
		wts, rts := w.(*avro.UnionSchema).Types(), r.(*avro.UnionSchema).Types()
		if len(wts) != len(rts) {
			return fmt.Sprintf("%sunion changed from %s to %s", at(), w, r)
		}
		for i := range wts {
			if reason := avroCheck(wts[i], rts[i], path); reason != "" {
				return reason
			}
		}
	}
	return ""
}

func typeName(s avro.Schema) string {
	if s.Type() == avro.Union {
		return "nullable " + s.String()
	}
	return string(s.Type())
}

// decoder decodes a variable's stored values, each with its writer's
// schema version resolved to the codec's.
type decoder[T any] struct {
	name    string
	c       state.Codec[T]
	ev      evolver[T] // nil: the codec reads every version as it is
	current uint32
	schemas []string
	cache   map[uint32]func([]byte) (T, error)
}

func newDecoder[T any](name string, c state.Codec[T], schemas []string, current uint32) *decoder[T] {
	ev, _ := c.(evolver[T])
	return &decoder[T]{name: name, c: c, ev: ev, current: current, schemas: schemas}
}

func (d *decoder[T]) decode(h changelog.Header, p []byte) (T, error) {
	id := h.SchemaID
	if id == 0 && len(d.schemas) > 0 {
		id = 1
	}
	if d.ev == nil || id == d.current || id == 0 {
		return d.c.Decode(p)
	}
	if f, ok := d.cache[id]; ok {
		return f(p)
	}
	var zero T
	if int(id) > len(d.schemas) {
		return zero, fmt.Errorf("%w: value written under schema version %d, but the registry of %q has %d versions",
			state.ErrCorrupt, id, d.name, len(d.schemas))
	}
	f, err := d.ev.DecoderFor(d.schemas[id-1])
	if err != nil {
		return zero, err
	}
	if d.cache == nil {
		d.cache = make(map[uint32]func([]byte) (T, error))
	}
	d.cache[id] = f
	return f(p)
}
