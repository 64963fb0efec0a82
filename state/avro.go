package state

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
)

// AvroSchemaPrefix starts the schema string (SchemaCodec.Schema, and the
// variable registry) of an Avro codec; the Avro schema's JSON follows it.
const AvroSchemaPrefix = "avro:"

// Avro returns a codec that stores T in the Avro binary encoding, with an
// Avro schema derived from T. It is the codec whose values can evolve
// across releases: the registry keeps every schema version of a variable,
// every stored value carries its writer's version, and a value written
// under an older schema is resolved to T's schema when it is read.
//
// The schema follows T:
//
//	int32                 → int         int64, int → long
//	float32               → float       float64    → double
//	string                → string      []byte     → bytes
//	bool                  → boolean     struct     → record
//	[]X                   → array of X  map[string]X → map of X
//	*X                    → ["null", X] (default null)
//
// A struct's exported fields are the record's fields, named by their
// `avro:"name"` tag (the Go field name without one); fields tagged
// `avro:"-"` are left out. Record names follow the field path ("root",
// "root.address", ...), so renaming a Go type changes nothing; embedded
// structs, recursive types and other Go types (unsigned integers, int8,
// int16, interfaces, time.Time, maps with non-string keys) are refused when
// the variable is declared.
//
// Every field has a default, so a field added in a later release reads as
// that default in values written before it existed: the
// `avrodefault:"value"` tag gives it (a number, true/false or the text of a
// string or bytes field; JSON for records, arrays and maps), otherwise it is
// the Go zero value (0, "", false, empty, null for pointers).
//
// Evolution allowed between releases (checked when Init declares the
// variable, against every schema version in the registry): add a field,
// remove a field, reorder fields (matched by name), widen int32 → int64 and
// float32 → float64. Refused with a *SchemaChangeError: narrowing (int64 →
// int32, float64 → float32), any other type change (a value made a pointer
// or back included), and a change of a MapState key schema.
// A renamed field is a removed field plus an added one: old values read
// the new field's default.
//
// A string or bytes field holds at most 256 MiB and an array or map field
// at most 1,048,576 elements (Encode refuses more); keep big collections in
// a ListState or MapState.
//
// As a MapState key codec, the Avro encoding sorts by bytes (not in
// numeric order), and T must not contain maps (Go map order makes their
// encoding non-deterministic).
func Avro[T any]() Codec[T] {
	c := &avroCodec[T]{}
	js, err := deriveAvro(reflect.TypeFor[T]())
	if err != nil {
		c.err = fmt.Errorf("state: Avro codec of %s: %w", reflect.TypeFor[T](), err)
		return c
	}
	c.schemaJSON = js
	c.checkElems = elemsChecker(reflect.TypeFor[T]())
	// Every derived schema names its top record "root": each parse gets its
	// own name cache, so that schemas of different types (or versions)
	// never meet in the library's process-wide one.
	if c.schema, err = avro.ParseWithCache(js, "", &avro.SchemaCache{}); err != nil {
		c.err = fmt.Errorf("state: Avro codec of %s: derived schema %s: %w", reflect.TypeFor[T](), js, err)
	}
	return c
}

// avroMaxBytes bounds one string or bytes field when decoding, instead of
// the library's default of 1 MiB (which would make a value that encoded
// fine unreadable). A value is one changelog record, so Kafka's record
// size limit bounds it long before this; the bound only keeps a corrupt
// length from allocating without limit.
const avroMaxBytes = 256 << 20

// avroMaxElems bounds the elements of one array or map field of a value:
// a corrupt block count must not allocate without limit, and Encode
// refuses what Decode would refuse. Big collections belong in a ListState
// or MapState, where every element is its own entry.
const avroMaxElems = 1 << 20

// avroAPI is the frozen (immutable, concurrency-safe) hamba configuration
// every Avro codec uses.
var avroAPI = avro.Config{TagKey: "avro", MaxByteSliceSize: avroMaxBytes, MaxSliceAllocSize: avroMaxElems}.Freeze()

// avroReaders pools the readers decode uses instead of avroAPI.Unmarshal,
// which reports a value cut short inside a number as success (hamba
// treats io.EOF as the end of input): a truncated stored value must be an
// error, not a zero field.
var avroReaders = sync.Pool{New: func() any { return avro.NewReader(nil, 0, avro.WithReaderConfig(avroAPI)) }}

type avroCodec[T any] struct {
	schema     avro.Schema
	schemaJSON string
	err        error // the type has no Avro schema; reported at declaration
	// checkElems checks the sizes of T's arrays and maps against
	// avroMaxElems before Encode; nil when T has none.
	checkElems func(reflect.Value) *elemsError
}

// elemsChecker returns a check that refuses an array or map of more than
// avroMaxElems elements anywhere in a value of t, visiting only the fields
// that lead to arrays and maps; nil when t has none. t has an Avro schema
// (so it is not recursive).
func elemsChecker(t reflect.Type) func(reflect.Value) *elemsError {
	switch t.Kind() {
	case reflect.Pointer:
		inner := elemsChecker(t.Elem())
		if inner == nil {
			return nil
		}
		return func(v reflect.Value) *elemsError {
			if v.IsNil() {
				return nil
			}
			return inner(v.Elem())
		}
	case reflect.Struct:
		type field struct {
			i     int
			name  string
			check func(reflect.Value) *elemsError
		}
		var fields []field
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() {
				if c := elemsChecker(f.Type); c != nil {
					fields = append(fields, field{i, f.Name, c})
				}
			}
		}
		if len(fields) == 0 {
			return nil
		}
		return func(v reflect.Value) *elemsError {
			for _, f := range fields {
				if err := f.check(v.Field(f.i)); err != nil {
					err.path = "." + f.name + err.path
					return err
				}
			}
			return nil
		}
	case reflect.Slice, reflect.Map:
		if t.Kind() == reflect.Slice && t.Elem().Kind() == reflect.Uint8 {
			return nil
		}
		inner := elemsChecker(t.Elem())
		return func(v reflect.Value) *elemsError {
			if v.Len() > avroMaxElems {
				return &elemsError{n: v.Len()}
			}
			if inner == nil {
				return nil
			}
			if v.Kind() == reflect.Slice {
				for i := range v.Len() {
					if err := inner(v.Index(i)); err != nil {
						err.path = "[]" + err.path
						return err
					}
				}
				return nil
			}
			for it := v.MapRange(); it.Next(); {
				if err := inner(it.Value()); err != nil {
					err.path = "{}" + err.path
					return err
				}
			}
			return nil
		}
	}
	return nil
}

type elemsError struct {
	path string
	n    int
}

func (e *elemsError) Error() string {
	return fmt.Sprintf("root%s: %d elements, more than the %d an Avro state value may hold in one array or map (keep big collections in a ListState or MapState)", e.path, e.n, avroMaxElems)
}

func (c *avroCodec[T]) Encode(v T) ([]byte, error) {
	if c.err != nil {
		return nil, c.err
	}
	if c.checkElems != nil {
		if err := c.checkElems(reflect.ValueOf(&v).Elem()); err != nil {
			return nil, fmt.Errorf("state: avro codec: encode %s: %w", reflect.TypeFor[T](), err)
		}
	}
	b, err := avroAPI.Marshal(c.schema, v)
	if err != nil {
		return nil, fmt.Errorf("state: avro codec: encode %s: %w", reflect.TypeFor[T](), err)
	}
	return b, nil
}

func (c *avroCodec[T]) Decode(b []byte) (T, error) {
	return c.decode(c.schema, b)
}

func (c *avroCodec[T]) decode(s avro.Schema, b []byte) (T, error) {
	var v T
	if c.err != nil {
		return v, c.err
	}
	r := avroReaders.Get().(*avro.Reader)
	defer avroReaders.Put(r.Reset(nil))
	r.Reset(b)
	r.Error = nil
	r.ReadVal(s, &v)
	if err := r.Error; err != nil {
		if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
			return v, fmt.Errorf("state: avro codec: decode %s: value of %d bytes is truncated: %w", reflect.TypeFor[T](), len(b), err)
		}
		return v, fmt.Errorf("state: avro codec: decode %s: %w", reflect.TypeFor[T](), err)
	}
	if r.Peek(); r.Error == nil {
		return v, fmt.Errorf("state: avro codec: decode %s: bytes left over after the value (%d bytes in all): not a value of this schema", reflect.TypeFor[T](), len(b))
	}
	return v, nil
}

// Schema is AvroSchemaPrefix followed by the Avro schema JSON.
func (c *avroCodec[T]) Schema() string {
	if c.err != nil {
		return ""
	}
	return AvroSchemaPrefix + c.schemaJSON
}

// SchemaError reports a T that has no Avro schema; the shard refuses the
// declaration with it.
func (c *avroCodec[T]) SchemaError() error { return c.err }

// DecoderFor returns a decoder of values written under writer (a schema
// string of an earlier version) that resolves them to T's schema. The
// shard caches the result per schema version.
func (c *avroCodec[T]) DecoderFor(writer string) (func([]byte) (T, error), error) {
	if c.err != nil {
		return nil, c.err
	}
	js, ok := strings.CutPrefix(writer, AvroSchemaPrefix)
	if !ok {
		return nil, fmt.Errorf("state: avro codec: writer schema %q is not an Avro schema", writer)
	}
	ws, err := avro.ParseWithCache(js, "", &avro.SchemaCache{})
	if err != nil {
		return nil, fmt.Errorf("state: avro codec: writer schema %s: %w", js, err)
	}
	resolved, err := avro.NewSchemaCompatibility().Resolve(c.schema, ws)
	if err != nil {
		return nil, fmt.Errorf("state: avro codec: resolve writer schema %s to %s: %w", js, c.schemaJSON, err)
	}
	return func(b []byte) (T, error) { return c.decode(resolved, b) }, nil
}

// Schema derivation. The schema is built as JSON values (maps marshal with
// sorted keys, so the text is deterministic for a type) and parsed once.

var avroName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*$`)

func deriveAvro(t reflect.Type) (string, error) {
	d := deriver{seen: map[reflect.Type]bool{}}
	s, err := d.schema(t, "root")
	if err != nil {
		return "", err
	}
	b, err := json.Marshal(s)
	return string(b), err
}

type deriver struct {
	seen map[reflect.Type]bool // structs on the current path (recursion)
}

func (d *deriver) schema(t reflect.Type, path string) (any, error) {
	switch t.Kind() {
	case reflect.Int32:
		return "int", nil
	case reflect.Int64, reflect.Int:
		return "long", nil
	case reflect.Float32:
		return "float", nil
	case reflect.Float64:
		return "double", nil
	case reflect.String:
		return "string", nil
	case reflect.Bool:
		return "boolean", nil
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return "bytes", nil
		}
		items, err := d.schema(t.Elem(), path+".item")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("%s: map key %s: Avro maps have string keys", path, t.Key())
		}
		values, err := d.schema(t.Elem(), path+".value")
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "map", "values": values}, nil
	case reflect.Pointer:
		if t.Elem().Kind() == reflect.Pointer {
			return nil, fmt.Errorf("%s: pointer to pointer %s", path, t)
		}
		elem, err := d.schema(t.Elem(), path)
		if err != nil {
			return nil, err
		}
		return []any{"null", elem}, nil
	case reflect.Struct:
		return d.record(t, path)
	}
	return nil, fmt.Errorf("%s: Go type %s has no Avro schema here (use int32, int64, int, float32, float64, string, []byte, bool, structs, slices, map[string]X or pointers)", path, t)
}

func (d *deriver) record(t reflect.Type, path string) (any, error) {
	if d.seen[t] {
		return nil, fmt.Errorf("%s: recursive type %s", path, t)
	}
	d.seen[t] = true
	defer delete(d.seen, t)
	ns, name := "", path
	if i := strings.LastIndexByte(path, '.'); i >= 0 {
		ns, name = path[:i], path[i+1:]
	}
	fields := []any{}
	names := map[string]string{}
	for i := range t.NumField() {
		f := t.Field(i)
		if f.Anonymous {
			return nil, fmt.Errorf("%s: embedded field %s: name it (embedded structs are not supported)", path, f.Name)
		}
		if !f.IsExported() {
			continue
		}
		fname := f.Name
		if tag, ok := f.Tag.Lookup("avro"); ok {
			fname, _, _ = strings.Cut(tag, ",")
		}
		if fname == "-" {
			continue
		}
		if !avroName.MatchString(fname) {
			return nil, fmt.Errorf("%s: field %s: %q is not an Avro name ([A-Za-z_][A-Za-z0-9_]*)", path, f.Name, fname)
		}
		if other, dup := names[fname]; dup {
			return nil, fmt.Errorf("%s: fields %s and %s are both named %q", path, other, f.Name, fname)
		}
		names[fname] = f.Name
		fs, err := d.schema(f.Type, path+"."+fname)
		if err != nil {
			return nil, err
		}
		def, err := fieldDefault(f, fs)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", path, fname, err)
		}
		fields = append(fields, map[string]any{"name": fname, "type": fs, "default": def})
	}
	r := map[string]any{"type": "record", "name": name, "fields": fields}
	if ns != "" {
		r["namespace"] = ns
	}
	return r, nil
}

// fieldDefault is the field's avrodefault tag, parsed for its schema s, or
// the zero value of s.
func fieldDefault(f reflect.StructField, s any) (any, error) {
	tag, ok := f.Tag.Lookup("avrodefault")
	if !ok {
		return zeroDefault(s), nil
	}
	switch s {
	case "int", "long":
		n, err := strconv.ParseInt(tag, 10, 64)
		if err != nil {
			return nil, fmt.Errorf("avrodefault %q: %w", tag, err)
		}
		return n, nil
	case "float", "double":
		x, err := strconv.ParseFloat(tag, 64)
		if err != nil {
			return nil, fmt.Errorf("avrodefault %q: %w", tag, err)
		}
		return x, nil
	case "boolean":
		b, err := strconv.ParseBool(tag)
		if err != nil {
			return nil, fmt.Errorf("avrodefault %q: %w", tag, err)
		}
		return b, nil
	case "string", "bytes":
		return tag, nil
	}
	if _, union := s.([]any); union {
		return nil, fmt.Errorf("avrodefault %q on a pointer field: its default is always null", tag)
	}
	var v any
	if err := json.Unmarshal([]byte(tag), &v); err != nil {
		return nil, fmt.Errorf("avrodefault %q: not JSON: %w", tag, err)
	}
	return v, nil
}

func zeroDefault(s any) any {
	switch s := s.(type) {
	case string:
		switch s {
		case "int", "long", "float", "double":
			return 0
		case "boolean":
			return false
		}
		return ""
	case []any:
		return nil
	case map[string]any:
		switch s["type"] {
		case "array":
			return []any{}
		case "map":
			return map[string]any{}
		}
		obj := map[string]any{}
		for _, f := range s["fields"].([]any) {
			fm := f.(map[string]any)
			obj[fm["name"].(string)] = fm["default"]
		}
		return obj
	}
	return nil
}
