package statereader

import (
	"encoding/json"
	"strings"

	"github.com/kstate/kstate/state"
)

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
