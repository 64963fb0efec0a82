package serde_test

import (
	"bytes"
	"encoding/hex"
	"encoding/json"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/kstate/kstate/serde"
)

// vector is one value with the bytes Kafka's Java serializer writes for it.
type vector[T any] struct {
	v    T
	want string // hex, spaces allowed
}

func unhex(t testing.TB, s string) []byte {
	t.Helper()
	b, err := hex.DecodeString(strings.ReplaceAll(s, " ", ""))
	if err != nil {
		t.Fatalf("bad test vector %q: %v", s, err)
	}
	return b
}

// checkVectors asserts that s serializes each value to the Java bytes and
// deserializes those bytes back to an equal value (eq decides equality, so
// floats can be compared bit for bit).
func checkVectors[T any](t *testing.T, s serde.Serde[T], eq func(a, b T) bool, vs []vector[T]) {
	t.Helper()
	for _, tc := range vs {
		want := unhex(t, tc.want)
		got, err := s.Serialize(tc.v)
		if err != nil {
			t.Errorf("Serialize(%v): %v", tc.v, err)
			continue
		}
		if !bytes.Equal(got, want) {
			t.Errorf("Serialize(%v) = % x, want % x", tc.v, got, want)
		}
		back, err := s.Deserialize(want)
		if err != nil {
			t.Errorf("Deserialize(% x): %v", want, err)
			continue
		}
		if !eq(back, tc.v) {
			t.Errorf("Deserialize(% x) = %v, want %v", want, back, tc.v)
		}
	}
}

func equal[T comparable](a, b T) bool { return a == b }
func sameBits64(a, b float64) bool    { return math.Float64bits(a) == math.Float64bits(b) }
func sameBits32(a, b float32) bool    { return math.Float32bits(a) == math.Float32bits(b) }
func sameBytes(a, b []byte) bool      { return bytes.Equal(a, b) && (a == nil) == (b == nil) }
func f64(bits uint64) float64         { return math.Float64frombits(bits) }
func f32(bits uint32) float32         { return math.Float32frombits(bits) }
func negZero64() float64              { return math.Copysign(0, -1) }
func negZero32() float32              { return float32(math.Copysign(0, -1)) }
func serializeOK[T any](s serde.Serde[T]) func(T) []byte {
	return func(v T) []byte { b, _ := s.Serialize(v); return b }
}

// The vectors below are the bytes written by the serializers in
// org.apache.kafka.common.serialization.

func TestInt64JavaVectors(t *testing.T) {
	checkVectors(t, serde.Int64(), equal[int64], []vector[int64]{
		{0, "00 00 00 00 00 00 00 00"},
		{1, "00 00 00 00 00 00 00 01"},
		{-1, "ff ff ff ff ff ff ff ff"},
		{-2, "ff ff ff ff ff ff ff fe"},
		{258, "00 00 00 00 00 00 01 02"},
		{1_700_000_000_000, "00 00 01 8b cf e5 68 00"},
		{math.MinInt64, "80 00 00 00 00 00 00 00"},
		{math.MaxInt64, "7f ff ff ff ff ff ff ff"},
	})
}

func TestInt32JavaVectors(t *testing.T) {
	checkVectors(t, serde.Int32(), equal[int32], []vector[int32]{
		{0, "00 00 00 00"},
		{258, "00 00 01 02"},
		{-1, "ff ff ff ff"},
		{-258, "ff ff fe fe"},
		{math.MinInt32, "80 00 00 00"},
		{math.MaxInt32, "7f ff ff ff"},
	})
}

func TestInt16JavaVectors(t *testing.T) {
	checkVectors(t, serde.Int16(), equal[int16], []vector[int16]{
		{0, "00 00"},
		{258, "01 02"},
		{-2, "ff fe"},
		{math.MinInt16, "80 00"},
		{math.MaxInt16, "7f ff"},
	})
}

func TestFloat64JavaVectors(t *testing.T) {
	checkVectors(t, serde.Float64(), sameBits64, []vector[float64]{
		{0, "00 00 00 00 00 00 00 00"},
		{negZero64(), "80 00 00 00 00 00 00 00"},
		{1.5, "3f f8 00 00 00 00 00 00"},
		{-2, "c0 00 00 00 00 00 00 00"},
		{0.1, "3f b9 99 99 99 99 99 9a"},
		{math.Inf(1), "7f f0 00 00 00 00 00 00"},
		{math.Inf(-1), "ff f0 00 00 00 00 00 00"},
		{math.MaxFloat64, "7f ef ff ff ff ff ff ff"},
		{math.SmallestNonzeroFloat64, "00 00 00 00 00 00 00 01"},
		{f64(0x7ff8000000000000), "7f f8 00 00 00 00 00 00"}, // Double.NaN
		{f64(0x7ff0000000000001), "7f f0 00 00 00 00 00 01"}, // signalling NaN, raw bits kept
		{f64(0xfff8000000000123), "ff f8 00 00 00 00 01 23"}, // negative NaN with payload
	})
}

func TestFloat32JavaVectors(t *testing.T) {
	checkVectors(t, serde.Float32(), sameBits32, []vector[float32]{
		{0, "00 00 00 00"},
		{negZero32(), "80 00 00 00"},
		{1.5, "3f c0 00 00"},
		{-2, "c0 00 00 00"},
		{float32(math.Inf(1)), "7f 80 00 00"},
		{math.MaxFloat32, "7f 7f ff ff"},
		{math.SmallestNonzeroFloat32, "00 00 00 01"},
		{f32(0x7fc00000), "7f c0 00 00"}, // Float.NaN
		{f32(0x7f800001), "7f 80 00 01"}, // signalling NaN, raw bits kept
		{f32(0xffc00123), "ff c0 01 23"}, // negative NaN with payload
	})
}

func TestBoolJavaVectors(t *testing.T) {
	checkVectors(t, serde.Bool(), equal[bool], []vector[bool]{
		{false, "00"},
		{true, "01"},
	})
}

func TestStringJavaVectors(t *testing.T) {
	checkVectors(t, serde.String(), equal[string], []vector[string]{
		{"", ""},
		{"hello", "68 65 6c 6c 6f"},
		{"héllo", "68 c3 a9 6c 6c 6f"},
		{"€", "e2 82 ac"},
		{"😀", "f0 9f 98 80"}, // one code point, a surrogate pair in Java, 4 bytes in UTF-8
		{"a\x00b", "61 00 62"},
	})
}

func TestStringKeepsInvalidUTF8(t *testing.T) {
	in := []byte{0xff, 'a', 0xc3}
	s, err := serde.String().Deserialize(in)
	if err != nil {
		t.Fatal(err)
	}
	if out := serializeOK(serde.String())(s); !bytes.Equal(out, in) {
		t.Errorf("round trip of invalid UTF-8 = % x, want % x", out, in)
	}
	if s, err := serde.String().Deserialize(nil); err != nil || s != "" {
		t.Errorf("Deserialize(nil) = %q, %v; want \"\", nil", s, err)
	}
}

func TestBytes(t *testing.T) {
	checkVectors(t, serde.Bytes(), sameBytes, []vector[[]byte]{
		{[]byte{}, ""},
		{[]byte{0, 1, 0xff}, "00 01 ff"},
	})
	if b, err := serde.Bytes().Deserialize(nil); err != nil || b != nil {
		t.Errorf("Deserialize(nil) = %#v, %v; want nil, nil (a null value stays null)", b, err)
	}
}

func TestBytesDeserializeCopies(t *testing.T) {
	buf := []byte("record")
	got, err := serde.Bytes().Deserialize(buf)
	if err != nil {
		t.Fatal(err)
	}
	copy(buf, "XXXXXX") // the engine reuses the record buffer
	if string(got) != "record" {
		t.Errorf("Deserialize result changed with the input buffer: %q", got)
	}
}

type order struct {
	ID    string   `json:"id"`
	Qty   int      `json:"qty"`
	Price float64  `json:"price"`
	Tags  []string `json:"tags,omitempty"`
}

func TestJSON(t *testing.T) {
	checkVectors(t, serde.JSON[order](), func(a, b order) bool {
		return a.ID == b.ID && a.Qty == b.Qty && a.Price == b.Price && strings.Join(a.Tags, ",") == strings.Join(b.Tags, ",")
	}, []vector[order]{
		{order{ID: "o-1", Qty: 2, Price: 1.5}, hex.EncodeToString([]byte(`{"id":"o-1","qty":2,"price":1.5}`))},
		{order{ID: "é", Tags: []string{"a"}}, hex.EncodeToString([]byte(`{"id":"é","qty":0,"price":0,"tags":["a"]}`))},
	})
	checkVectors(t, serde.JSON[int64](), equal[int64], []vector[int64]{{-2, "2d 32"}})
}

func TestJSONErrors(t *testing.T) {
	s := serde.JSON[order]()
	for _, tc := range []struct {
		name  string
		in    []byte
		check func(error) bool
	}{
		{"syntax", []byte(`{"id":`), func(err error) bool { var e *json.SyntaxError; return errors.As(err, &e) }},
		{"type", []byte(`{"qty":"two"}`), func(err error) bool { var e *json.UnmarshalTypeError; return errors.As(err, &e) }},
		{"nil", nil, func(err error) bool { var e *json.SyntaxError; return errors.As(err, &e) }},
	} {
		_, err := s.Deserialize(tc.in)
		if err == nil {
			t.Errorf("%s: Deserialize(%q) succeeded", tc.name, tc.in)
			continue
		}
		if !tc.check(err) {
			t.Errorf("%s: error %v (%T) does not wrap the encoding/json error", tc.name, err, errors.Unwrap(err))
		}
		checkError(t, err, "JSON[serde_test.order]", "deserialize")
	}

	_, err := serde.JSON[chan int]().Serialize(make(chan int))
	var ute *json.UnsupportedTypeError
	if !errors.As(err, &ute) {
		t.Fatalf("Serialize(chan) error = %v, want a wrapped *json.UnsupportedTypeError", err)
	}
	checkError(t, err, "JSON[chan int]", "serialize")
}

// checkError asserts err is a *serde.Error for the given serde and op whose
// message has the package prefix exactly once.
func checkError(t *testing.T, err error, name, op string) {
	t.Helper()
	var e *serde.Error
	if !errors.As(err, &e) {
		t.Fatalf("error %v (%T) is not a *serde.Error", err, err)
	}
	if e.Serde != name || e.Op != op {
		t.Errorf("error has Serde %q, Op %q; want %q, %q", e.Serde, e.Op, name, op)
	}
	msg := err.Error()
	if !strings.HasPrefix(msg, "serde: "+name+": "+op+": ") || strings.Count(msg, "serde: ") != 1 {
		t.Errorf("error message %q: want prefix %q and \"serde: \" once", msg, "serde: "+name+": "+op+": ")
	}
}

// fixedSerde is the untyped view of a fixed-size serde used by the
// size and fuzz tests.
type fixedSerde struct {
	name, java string
	size       int
	roundTrip  func([]byte) ([]byte, error) // Deserialize, then Serialize the result
}

func rt[T any](s serde.Serde[T]) func([]byte) ([]byte, error) {
	return func(b []byte) ([]byte, error) {
		v, err := s.Deserialize(b)
		if err != nil {
			return nil, err
		}
		return s.Serialize(v)
	}
}

func fixedSerdes() []fixedSerde {
	return []fixedSerde{
		{"Int64", "LongSerializer", 8, rt(serde.Int64())},
		{"Int32", "IntegerSerializer", 4, rt(serde.Int32())},
		{"Int16", "ShortSerializer", 2, rt(serde.Int16())},
		{"Float64", "DoubleSerializer", 8, rt(serde.Float64())},
		{"Float32", "FloatSerializer", 4, rt(serde.Float32())},
		{"Bool", "BooleanSerializer", 1, rt(serde.Bool())},
	}
}

func TestWrongSize(t *testing.T) {
	for _, s := range fixedSerdes() {
		inputs := [][]byte{nil}
		for n := 0; n <= s.size+1; n++ {
			if n != s.size {
				inputs = append(inputs, make([]byte, n))
			}
		}
		inputs = append(inputs, make([]byte, 2*s.size))
		for _, in := range inputs {
			_, err := s.roundTrip(in)
			if !errors.Is(err, serde.ErrSize) {
				t.Errorf("%s: Deserialize(%d bytes) error = %v, want ErrSize", s.name, len(in), err)
				continue
			}
			checkError(t, err, s.name, "deserialize")
			if !strings.Contains(err.Error(), "want "+strconv.Itoa(s.size)) {
				t.Errorf("%s: message %q does not give the wanted size", s.name, err)
			}
			hint := s.java
			if len(in) == 0 {
				hint = strings.Replace(s.java, "Serializer", "Deserializer", 1) + " would give null"
			}
			if !strings.Contains(err.Error(), hint) {
				t.Errorf("%s: message %q does not contain %q", s.name, err, hint)
			}
		}
	}
	want := "serde: Int64: deserialize: 3 bytes, want 8 (written by Kafka's LongSerializer?)"
	if _, err := serde.Int64().Deserialize([]byte{1, 2, 3}); err == nil || err.Error() != want {
		t.Errorf("Int64 error = %v, want %q", err, want)
	}
}

func TestBoolRejectsOtherBytes(t *testing.T) {
	for _, c := range []byte{0x02, 0x10, 0x80, 0xff} {
		v, err := serde.Bool().Deserialize([]byte{c})
		if err == nil {
			t.Errorf("Deserialize(%02x) = %v, want an error (Kafka's BooleanDeserializer rejects it)", c, v)
			continue
		}
		if errors.Is(err, serde.ErrSize) {
			t.Errorf("Deserialize(%02x) error %v wraps ErrSize, but the size is right", c, err)
		}
		checkError(t, err, "Bool", "deserialize")
	}
}

func TestFuncAdapters(t *testing.T) {
	var ser serde.Serializer[int] = serde.SerializerFunc[int](func(v int) ([]byte, error) { return []byte{byte(v)}, nil })
	var de serde.Deserializer[int] = serde.DeserializerFunc[int](func(b []byte) (int, error) { return len(b), nil })
	if b, _ := ser.Serialize(7); !bytes.Equal(b, []byte{7}) {
		t.Errorf("SerializerFunc.Serialize(7) = % x, want 07", b)
	}
	if n, _ := de.Deserialize([]byte{1, 2, 3}); n != 3 {
		t.Errorf("DeserializerFunc.Deserialize(3 bytes) = %d, want 3", n)
	}
}

// FuzzDeserialize checks that the fixed-size deserializers never panic, fail
// with ErrSize exactly when the length is wrong, and, when they succeed,
// serialize the value back to the same bytes (bit patterns, NaN payloads
// included, survive).
func FuzzDeserialize(f *testing.F) {
	for _, seed := range []string{"", "00", "01", "02", "ff fe", "00 00 01 02", "7f c0 00 01",
		"ff ff ff ff ff ff ff fe", "7f f0 00 00 00 00 00 01", "00 00 00 00 00 00 00 00 00"} {
		f.Add(unhex(f, seed))
	}
	serdes := fixedSerdes()
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, s := range serdes {
			out, err := s.roundTrip(b)
			if sizeErr := errors.Is(err, serde.ErrSize); sizeErr != (len(b) != s.size) {
				t.Fatalf("%s: Deserialize(% x) error = %v; want ErrSize iff length != %d", s.name, b, err, s.size)
			}
			if err != nil {
				var e *serde.Error
				if !errors.As(err, &e) {
					t.Fatalf("%s: error %v is not a *serde.Error", s.name, err)
				}
				continue
			}
			if !bytes.Equal(out, b) {
				t.Fatalf("%s: round trip of % x gave % x", s.name, b, out)
			}
		}
	})
}
