package statereader

import (
	"encoding/json"
	"errors"
	"strings"
	"sync"

	"github.com/hamba/avro/v2"
	"github.com/kstate/kstate/state"
)

// decoders caches the built-in decoder of each schema string: an Avro
// schema is parsed once per Reader, not once per value.
type decoders struct {
	mu sync.Mutex
	m  map[string]Decoder
}

// builtin returns the built-in decoder of schema (nil: none), cached.
func (r *Reader) builtin(schema string) Decoder {
	r.dec.mu.Lock()
	defer r.dec.mu.Unlock()
	if d, ok := r.dec.m[schema]; ok {
		return d
	}
	d := builtinDecoder(schema)
	if d == nil {
		d = avroDecoder(schema)
	}
	if r.dec.m == nil {
		r.dec.m = map[string]Decoder{}
	}
	r.dec.m[schema] = d
	return d
}

// avroDecoder decodes state.Avro payloads with the writer's schema into
// generic JSON (records as objects, bytes as base64, a nullable union as
// the value or null), or returns nil for other schemas.
func avroDecoder(schema string) Decoder {
	js, ok := strings.CutPrefix(schema, state.AvroSchemaPrefix)
	if !ok {
		return nil
	}
	s, err := avro.ParseWithCache(js, "", &avro.SchemaCache{})
	if err != nil {
		return nil
	}
	return func(b []byte) (json.RawMessage, error) {
		var v any
		if err := avro.Unmarshal(s, b, &v); err != nil {
			return nil, err
		}
		if v == nil && s.Type() != avro.Null {
			return nil, errors.New("statereader: undecodable Avro payload")
		}
		return json.Marshal(v)
	}
}

// builtinDecoder returns the decoder of a built-in codec's schema, or nil.
func builtinDecoder(schema string) Decoder {
	switch {
	case schema == "string":
		return viaCodec(state.String())
	case schema == "bytes":
		return viaCodec(state.Bytes())
	case schema == "int64":
		return viaCodec(state.Int64())
	case schema == "int32":
		return viaCodec(state.Int32())
	case schema == "int":
		return viaCodec(state.Int())
	case schema == "uint64":
		return viaCodec(state.Uint64())
	case schema == "float64":
		return viaCodec(state.Float64())
	case schema == "float32":
		return viaCodec(state.Float32())
	case schema == "bool":
		return viaCodec(state.Bool())
	case strings.HasPrefix(schema, "json:"):
		return func(b []byte) (json.RawMessage, error) { return json.RawMessage(b), nil }
	}
	return nil
}

func viaCodec[T any](c state.Codec[T]) Decoder {
	return func(b []byte) (json.RawMessage, error) {
		v, err := c.Decode(b)
		if err != nil {
			return nil, err
		}
		return json.Marshal(v)
	}
}
