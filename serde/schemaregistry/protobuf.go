package schemaregistry

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/twmb/franz-go/pkg/sr"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
)

// Protobuf returns the serde of the generated Protobuf message type T
// (e.g. *orderpb.Order), whose .proto file is schema (its text, as the
// registry stores it). The constructor looks the schema up (or registers
// it) like Avro's. The wire format has, after the schema id, the message
// indexes: the path of T's message in its file (from T's descriptor), as
// Confluent's KafkaProtobufSerializer writes them.
//
// Deserialize checks that the record's schema id is a Protobuf schema in
// the registry and that its message indexes are T's, then decodes the
// payload into T (Protobuf's own rules make old and new versions of a
// message readable: unknown fields are kept, missing ones are zero). It
// does not parse the writer's .proto file: a writer whose file orders its
// messages differently has other indexes and fails with ErrIncompatible.
func Protobuf[T proto.Message](ctx context.Context, c *Client, schema string, o Options) (*Serde[T], error) {
	var zero T
	if any(zero) == nil {
		return nil, errors.New("schemaregistry: Protobuf needs a generated message type (e.g. *orderpb.Order), not an interface")
	}
	desc := zero.ProtoReflect().Descriptor()
	index := messageIndex(desc)
	decode := func(p []byte, v any) error {
		idx, payload, err := header.DecodeIndex(p, 64)
		if err != nil {
			return fmt.Errorf("read the message indexes: %w", err)
		}
		if !slices.Equal(idx, index) {
			return &Error{Op: "decode", Kind: ErrIncompatible, Err: fmt.Errorf("message indexes %v, the serde's %s is %v", idx, desc.FullName(), index)}
		}
		m := zero.ProtoReflect().Type().New().Interface()
		if err := proto.Unmarshal(payload, m); err != nil {
			return err
		}
		*(v.(*T)) = m.(T)
		return nil
	}
	f := format{
		typ:   sr.TypeProtobuf,
		index: index,
		encode: func(v any) ([]byte, error) {
			return proto.Marshal(*(v.(*T)))
		},
		decoderFor: func(sr.Schema) (decoder, error) { return decode, nil },
	}
	return newSerde[T](ctx, c, "Protobuf", fmt.Sprintf("message %q", desc.FullName()), schema, o, f, decode)
}

// messageIndex is the path of a message in its file: its index among the
// top-level messages, then among its parent's nested messages, and so on.
func messageIndex(d protoreflect.MessageDescriptor) []int {
	var path []int
	for {
		path = append(path, d.Index())
		parent, ok := d.Parent().(protoreflect.MessageDescriptor)
		if !ok {
			break
		}
		d = parent
	}
	slices.Reverse(path)
	return path
}
