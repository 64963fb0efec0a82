package schemaregistry_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/serde/schemaregistry"
)

// The stand-in registry does not parse .proto files: these are the texts
// a producer would register.
const timestampProto = `syntax = "proto3";
package google.protobuf;
message Timestamp { int64 seconds = 1; int32 nanos = 2; }`

const descriptorProto = `syntax = "proto2";
package google.protobuf;
message FileDescriptorSet {}
message FileDescriptorProto {}
message DescriptorProto { message ExtensionRange { optional int32 start = 1; optional int32 end = 2; } }`

func TestProtobufRoundTripAndWireBytes(t *testing.T) {
	srv := srtest.Start(t, srtest.Options{})
	c := client(t, srv, schemaregistry.Config{})
	s, err := schemaregistry.Protobuf[*timestamppb.Timestamp](ctx, c, timestampProto, schemaregistry.Options{Topic: "ticks", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, typ, _ := srv.Schema(s.SchemaID()); typ != "PROTOBUF" {
		t.Fatalf("registered as %q", typ)
	}
	in := &timestamppb.Timestamp{Seconds: 1700000000, Nanos: 5}
	b, err := s.Serialize(in)
	if err != nil {
		t.Fatal(err)
	}
	want, _ := proto.Marshal(in)
	// Magic byte, id, the one-byte shortcut 0 for message indexes [0], payload.
	if b[0] != 0 || binary.BigEndian.Uint32(b[1:5]) != uint32(s.SchemaID()) || b[5] != 0 || !bytes.Equal(b[6:], want) {
		t.Fatalf("wire bytes % x, want 00, id %d, 00, % x", b, s.SchemaID(), want)
	}
	out, err := s.Deserialize(b)
	if err != nil || !proto.Equal(out, in) {
		t.Fatalf("round trip %v, %v", out, err)
	}

	// A nested message: indexes [2, 0] as zig-zag varints: count 2 (0x04), 2 (0x04), 0 (0x00).
	n, err := schemaregistry.Protobuf[*descriptorpb.DescriptorProto_ExtensionRange](ctx, c, descriptorProto, schemaregistry.Options{Topic: "ranges", AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	nb, err := n.Serialize(&descriptorpb.DescriptorProto_ExtensionRange{Start: proto.Int32(3), End: proto.Int32(9)})
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(nb[5:8], []byte{0x04, 0x04, 0x00}) {
		t.Fatalf("message indexes % x, want 04 04 00", nb[5:8])
	}
	got, err := n.Deserialize(nb)
	if err != nil || got.GetStart() != 3 || got.GetEnd() != 9 {
		t.Fatalf("nested round trip %v, %v", got, err)
	}
	// Another message's indexes, or an Avro schema id: ErrIncompatible.
	other := append(append([]byte{}, nb[:5]...), append([]byte{0x04, 0x04, 0x02}, nb[8:]...)...)
	var e *schemaregistry.Error
	if _, err := n.Deserialize(other); !errors.Is(err, schemaregistry.ErrIncompatible) || !errors.As(err, &e) || e.ID != n.SchemaID() || e.Subject != "ranges-value" {
		t.Fatalf("indexes [2 1]: %v, want ErrIncompatible naming id and subject", err)
	}
	avroID := srv.Register("x-value", orderV1, "AVRO")
	if _, err := s.Deserialize(append([]byte{0, 0, 0, 0, byte(avroID)}, b[5:]...)); !errors.Is(err, schemaregistry.ErrIncompatible) {
		t.Fatalf("Avro id read by the Protobuf serde: %v, want ErrIncompatible", err)
	}
}

func benchProtobuf(b *testing.B) *schemaregistry.Serde[*timestamppb.Timestamp] {
	srv := srtest.Start(b, srtest.Options{})
	s, err := schemaregistry.Protobuf[*timestamppb.Timestamp](ctx, client(b, srv, schemaregistry.Config{}), timestampProto, schemaregistry.Options{Topic: "ticks", AutoRegister: true})
	if err != nil {
		b.Fatal(err)
	}
	return s
}

func BenchmarkProtobufSerialize(b *testing.B) {
	s := benchProtobuf(b)
	v := &timestamppb.Timestamp{Seconds: 1700000000, Nanos: 5}
	for b.Loop() {
		if _, err := s.Serialize(v); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkProtobufDeserialize(b *testing.B) {
	s := benchProtobuf(b)
	rec, _ := s.Serialize(&timestamppb.Timestamp{Seconds: 1700000000, Nanos: 5})
	for b.Loop() {
		if _, err := s.Deserialize(rec); err != nil {
			b.Fatal(err)
		}
	}
}
