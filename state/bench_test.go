package state_test

import (
	"testing"

	"github.com/kstate/kstate/state"
)

// benchValue is a typical session record.
type benchValue struct {
	User   string   `avro:"user" json:"user"`
	Clicks int64    `avro:"clicks" json:"clicks"`
	Score  float64  `avro:"score" json:"score"`
	Active bool     `avro:"active" json:"active"`
	Pages  []string `avro:"pages" json:"pages"`
	Home   address  `avro:"home" json:"home"`
}

var benchV = benchValue{User: "user-12345", Clicks: 42, Score: 3.25, Active: true,
	Pages: []string{"/", "/cart", "/checkout"}, Home: address{City: "Paris", Zip: 75001}}

func benchCodec(b *testing.B, c state.Codec[benchValue]) {
	enc, err := c.Encode(benchV)
	if err != nil {
		b.Fatal(err)
	}
	b.Run("encode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := c.Encode(benchV); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("decode", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := c.Decode(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkCodecs compares the Avro and JSON codecs on one struct value.
func BenchmarkCodecs(b *testing.B) {
	b.Run("avro", func(b *testing.B) { benchCodec(b, state.Avro[benchValue]()) })
	b.Run("json", func(b *testing.B) { benchCodec(b, state.JSON[benchValue]()) })
	// A value of an older schema version (no score, clicks an int),
	// resolved to benchValue: the read path after an upgrade.
	b.Run("avro/decode-resolved", func(b *testing.B) {
		type old struct {
			User   string   `avro:"user"`
			Clicks int32    `avro:"clicks"`
			Active bool     `avro:"active"`
			Pages  []string `avro:"pages"`
			Home   address  `avro:"home"`
		}
		oc := state.Avro[old]()
		enc, err := oc.Encode(old{User: benchV.User, Clicks: 42, Active: true, Pages: benchV.Pages, Home: benchV.Home})
		if err != nil {
			b.Fatal(err)
		}
		dec, err := state.Avro[benchValue]().(interface {
			DecoderFor(string) (func([]byte) (benchValue, error), error)
		}).DecoderFor(oc.(state.SchemaCodec).Schema())
		if err != nil {
			b.Fatal(err)
		}
		b.ReportAllocs()
		b.SetBytes(int64(len(enc)))
		for b.Loop() {
			if _, err := dec(enc); err != nil {
				b.Fatal(err)
			}
		}
	})
}
