package state_test

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/kstate/kstate/state"
)

// checkOrdered asserts that vs (sorted ascending) round-trip and that their
// encodings are strictly ascending bytes.
func checkOrdered[T comparable](t *testing.T, c state.Codec[T], vs []T) {
	t.Helper()
	var prev []byte
	for i, v := range vs {
		b, err := c.Encode(v)
		if err != nil {
			t.Fatalf("Encode(%v): %v", v, err)
		}
		got, err := c.Decode(b)
		if err != nil || got != v {
			t.Fatalf("Decode(Encode(%v)) = %v, %v", v, got, err)
		}
		if i > 0 && bytes.Compare(prev, b) >= 0 {
			t.Fatalf("encoding of %v (%x) does not sort after %v (%x)", v, b, vs[i-1], prev)
		}
		prev = b
	}
}

func TestCodecOrder(t *testing.T) {
	checkOrdered(t, state.Int64(), []int64{math.MinInt64, -1 << 40, -256, -1, 0, 1, 255, 256, 1 << 40, math.MaxInt64})
	checkOrdered(t, state.Int32(), []int32{math.MinInt32, -65536, -1, 0, 1, 65536, math.MaxInt32})
	checkOrdered(t, state.Int(), []int{math.MinInt, -3, 0, 3, math.MaxInt})
	checkOrdered(t, state.Uint64(), []uint64{0, 1, 255, 1 << 63, math.MaxUint64})
	checkOrdered(t, state.Float64(), []float64{math.Inf(-1), -math.MaxFloat64, -1.5, -math.SmallestNonzeroFloat64, 0, math.SmallestNonzeroFloat64, 1, 1.5, math.MaxFloat64, math.Inf(1)})
	checkOrdered(t, state.Float32(), []float32{float32(math.Inf(-1)), -2.5, -1e-30, 0, 1e-30, 2.5, float32(math.Inf(1))})
	checkOrdered(t, state.String(), []string{"", "A", "a", "aa", "ab", "b", "é"})
	checkOrdered(t, state.Bool(), []bool{false, true})
}

func TestCodecFloatSpecials(t *testing.T) {
	neg0, _ := state.Float64().Encode(math.Copysign(0, -1))
	pos0, _ := state.Float64().Encode(0)
	if bytes.Compare(neg0, pos0) >= 0 {
		t.Fatalf("-0 (%x) must sort before +0 (%x)", neg0, pos0)
	}
	b, _ := state.Float64().Encode(math.NaN())
	if v, err := state.Float64().Decode(b); err != nil || !math.IsNaN(v) {
		t.Fatalf("NaN round trip = %v, %v", v, err)
	}
}

func TestCodecRejectsBadInput(t *testing.T) {
	for _, tc := range []struct {
		name string
		dec  func([]byte) error
		in   []byte
	}{
		{"int64 short", func(b []byte) error { _, err := state.Int64().Decode(b); return err }, make([]byte, 7)},
		{"int64 long", func(b []byte) error { _, err := state.Int64().Decode(b); return err }, make([]byte, 9)},
		{"int32 8 bytes", func(b []byte) error { _, err := state.Int32().Decode(b); return err }, make([]byte, 8)},
		{"int empty", func(b []byte) error { _, err := state.Int().Decode(b); return err }, nil},
		{"uint64 short", func(b []byte) error { _, err := state.Uint64().Decode(b); return err }, make([]byte, 4)},
		{"float64 short", func(b []byte) error { _, err := state.Float64().Decode(b); return err }, make([]byte, 4)},
		{"float32 long", func(b []byte) error { _, err := state.Float32().Decode(b); return err }, make([]byte, 8)},
		{"bool 2", func(b []byte) error { _, err := state.Bool().Decode(b); return err }, []byte{2}},
		{"bool empty", func(b []byte) error { _, err := state.Bool().Decode(b); return err }, nil},
		{"json garbage", func(b []byte) error { _, err := state.JSON[struct{ A int }]().Decode(b); return err }, []byte("{")},
	} {
		if err := tc.dec(tc.in); err == nil {
			t.Errorf("%s: decoding %x succeeded", tc.name, tc.in)
		}
	}
}

func TestCodecBytesAndJSON(t *testing.T) {
	in := []byte{1, 2, 3}
	b, _ := state.Bytes().Encode(in)
	in[0] = 9 // the encoding must not alias the input
	out, err := state.Bytes().Decode(b)
	if err != nil || !slices.Equal(out, []byte{1, 2, 3}) {
		t.Fatalf("Bytes round trip = %v, %v", out, err)
	}
	type rec struct {
		Name string
		N    int
		Tags []string
	}
	c := state.JSON[rec]()
	v := rec{"x", 7, []string{"a"}}
	b, err = c.Encode(v)
	noErr(t, err)
	got, err := c.Decode(b)
	if err != nil || got.Name != "x" || got.N != 7 || len(got.Tags) != 1 {
		t.Fatalf("JSON round trip = %+v, %v", got, err)
	}
	if s := c.(state.SchemaCodec).Schema(); s != "json:state_test.rec" {
		t.Fatalf("JSON schema = %q", s)
	}
}

// FuzzCodecDecode: decoders see bytes from disk and from Kafka; they must
// never panic, and whatever they accept must re-encode to the same bytes
// (for the fixed-size codecs, whose encoding is canonical).
func FuzzCodecDecode(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0x80, 0, 0, 0, 0, 0, 0, 1})
	f.Add([]byte{1})
	f.Fuzz(func(t *testing.T, b []byte) {
		roundTrip(t, state.Int64(), b)
		roundTrip(t, state.Int32(), b)
		roundTrip(t, state.Int(), b)
		roundTrip(t, state.Uint64(), b)
		roundTrip(t, state.Float64(), b)
		roundTrip(t, state.Float32(), b)
		roundTrip(t, state.Bool(), b)
		roundTrip(t, state.String(), b)
		_, _ = state.JSON[map[string]int]().Decode(b)
	})
}

func roundTrip[T any](t *testing.T, c state.Codec[T], b []byte) {
	v, err := c.Decode(b)
	if err != nil {
		return
	}
	again, err := c.Encode(v)
	if err != nil || !bytes.Equal(again, b) {
		t.Fatalf("%T: Decode(%x) re-encodes to %x, %v", c, b, again, err)
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}
