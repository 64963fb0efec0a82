package changelog

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"testing"
)

// encodeKey is the inverse of DecodeKey, built only from the public builders.
func encodeKey(k Key) []byte {
	switch k.Kind {
	case KindMeta:
		return MetaKey(k.Name)
	case KindState:
		return StateKey(k.VarID, k.GroupKey, k.Suffix)
	case KindTimer:
		return TimerKey(k.Expiry, k.GroupKey)
	case KindTimerKey:
		return TimerByKey(k.GroupKey, k.Expiry)
	case KindTTL:
		return TTLKey(k.Expiry, k.StateKey)
	}
	return nil
}

type keyCase struct {
	name string
	key  []byte
	want Key
}

func keyCases() []keyCase {
	sk := StateKey(3, []byte("user-1"), listSuffix(9))
	return []keyCase{
		{"meta", MetaKey("var/count"), Key{Kind: KindMeta, Name: "var/count"}},
		{"meta empty", MetaKey(""), Key{Kind: KindMeta}},
		{"meta binary", MetaKey("\x00\xff"), Key{Kind: KindMeta, Name: "\x00\xff"}},
		{"value state", StateKey(7, []byte("user-1"), nil), Key{Kind: KindState, VarID: 7, GroupKey: []byte("user-1")}},
		{"empty group key", StateKey(7, nil, nil), Key{Kind: KindState, VarID: 7}},
		{"list state", StateKey(math.MaxUint32, []byte("g"), listSuffix(3)),
			Key{Kind: KindState, VarID: math.MaxUint32, GroupKey: []byte("g"), Suffix: listSuffix(3)}},
		{"map state binary", StateKey(1, []byte("g\x00\xff"), []byte("\x00mk\xff")),
			Key{Kind: KindState, VarID: 1, GroupKey: []byte("g\x00\xff"), Suffix: []byte("\x00mk\xff")}},
		{"timer", TimerKey(1000, []byte("k")), Key{Kind: KindTimer, Expiry: 1000, GroupKey: []byte("k")}},
		{"timer negative", TimerKey(-5, []byte("k")), Key{Kind: KindTimer, Expiry: -5, GroupKey: []byte("k")}},
		{"timer min", TimerKey(math.MinInt64, nil), Key{Kind: KindTimer, Expiry: math.MinInt64}},
		{"timer max", TimerKey(math.MaxInt64, []byte{0xff}), Key{Kind: KindTimer, Expiry: math.MaxInt64, GroupKey: []byte{0xff}}},
		{"timer by key", TimerByKey([]byte("k"), 10), Key{Kind: KindTimerKey, Expiry: 10, GroupKey: []byte("k")}},
		{"timer by key empty", TimerByKey(nil, -1), Key{Kind: KindTimerKey, Expiry: -1}},
		{"timer by key min", TimerByKey([]byte("k\x00"), math.MinInt64), Key{Kind: KindTimerKey, Expiry: math.MinInt64, GroupKey: []byte("k\x00")}},
		{"ttl", TTLKey(100, sk), Key{Kind: KindTTL, Expiry: 100, StateKey: sk}},
		{"ttl negative", TTLKey(-100, StateKey(0, nil, nil)), Key{Kind: KindTTL, Expiry: -100, StateKey: StateKey(0, nil, nil)}},
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, tc := range keyCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := DecodeKey(tc.key)
			if err != nil {
				t.Fatalf("DecodeKey(%x): %v", tc.key, err)
			}
			if got.Kind != tc.want.Kind || got.Name != tc.want.Name || got.VarID != tc.want.VarID ||
				got.Expiry != tc.want.Expiry || !bytes.Equal(got.GroupKey, tc.want.GroupKey) ||
				!bytes.Equal(got.Suffix, tc.want.Suffix) || !bytes.Equal(got.StateKey, tc.want.StateKey) {
				t.Fatalf("DecodeKey(%x) = %+v, want %+v", tc.key, got, tc.want)
			}
			if re := encodeKey(got); !bytes.Equal(re, tc.key) {
				t.Fatalf("re-encoded %x, want %x", re, tc.key)
			}
			if got.Kind.String() == "" || Kind(0x09).String() != "kind(0x09)" {
				t.Fatal("Kind.String")
			}
		})
	}
}

var badKeys = []struct {
	name string
	key  []byte
	want error
}{
	{"empty", nil, ErrShortKey},
	{"unknown kind", []byte{0x05, 1, 2}, ErrUnknownKind},
	// The shard's local offset key lives outside every kind on purpose: it
	// must never be accepted as a changelog key.
	{"local offset key", []byte("\xffoffset"), ErrUnknownKind},
	{"state short", []byte{0x01, 0, 0, 0, 1, 0, 0, 0}, ErrShortKey},
	{"state group key overruns", []byte{0x01, 0, 0, 0, 1, 0, 0, 0, 5, 'a', 'b'}, ErrShortKey},
	{"state huge group key length", []byte{0x01, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 'a'}, ErrShortKey},
	{"timer short", []byte{0x02, 1, 2, 3, 4, 5, 6, 7}, ErrShortKey},
	{"timer by key short", []byte{0x03, 0, 0}, ErrShortKey},
	{"timer by key missing expiry", []byte{0x03, 0, 0, 0, 1, 'k', 0, 0, 0}, ErrShortKey},
	{"timer by key trailing bytes", append(TimerByKey([]byte("k"), 1), 0), ErrShortKey},
	{"ttl short", []byte{0x04, 1, 2, 3}, ErrShortKey},
	{"ttl without state key", TTLKey(1, nil), ErrShortKey},
	{"ttl pointing at a timer", TTLKey(1, TimerKey(1, []byte("k"))), ErrShortKey},
	{"ttl pointing at a truncated state key", TTLKey(1, []byte{0x01, 0, 0}), ErrShortKey},
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, tc := range badKeys {
		t.Run(tc.name, func(t *testing.T) {
			k, err := DecodeKey(tc.key)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeKey(%x) = %+v, %v; want %v", tc.key, k, err, tc.want)
			}
		})
	}
}

func TestTimerKeyOrder(t *testing.T) {
	type timer struct {
		exp int64
		key string
	}
	var timers []timer
	for _, e := range []int64{math.MinInt64, math.MinInt64 + 1, -1000, -1, 0, 1, 255, 256, 1000, math.MaxInt64 - 1, math.MaxInt64} {
		for _, k := range []string{"", "\x00", "a", "a\x00", "b", "\xff\xff"} {
			timers = append(timers, timer{e, k})
		}
	}
	want := slices.Clone(timers)
	slices.SortFunc(want, func(a, b timer) int {
		if c := cmpInt64(a.exp, b.exp); c != 0 {
			return c
		}
		return bytes.Compare([]byte(a.key), []byte(b.key))
	})
	got := slices.Clone(timers)
	slices.Reverse(got) // start from a different order than the expected one
	slices.SortFunc(got, func(a, b timer) int {
		return bytes.Compare(TimerKey(a.exp, []byte(a.key)), TimerKey(b.exp, []byte(b.key)))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("timer keys sort as %v\nwant %v", got, want)
	}
	// Every timer key stays inside the timer key space.
	lo, hi := []byte{byte(KindTimer)}, []byte{byte(KindTimer) + 1}
	for _, tm := range timers {
		k := TimerKey(tm.exp, []byte(tm.key))
		if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Fatalf("TimerKey(%d,%q) = %x outside [%x,%x)", tm.exp, tm.key, k, lo, hi)
		}
	}
}

func TestTTLKeyOrder(t *testing.T) {
	exps := []int64{math.MinInt64, -2, -1, 0, 1, 1 << 40, math.MaxInt64}
	// A large state key at an earlier expiry must still sort first.
	big := StateKey(math.MaxUint32, bytes.Repeat([]byte{0xff}, 20), []byte{0xff})
	small := StateKey(0, nil, nil)
	var keys [][]byte
	for i := len(exps) - 1; i >= 0; i-- {
		keys = append(keys, TTLKey(exps[i], small), TTLKey(exps[i], big))
	}
	slices.SortFunc(keys, bytes.Compare)
	for i, k := range keys {
		d, err := DecodeKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if d.Expiry != exps[i/2] {
			t.Fatalf("position %d holds expiry %d, want %d", i, d.Expiry, exps[i/2])
		}
	}
}

type valueCase struct {
	h       Header
	payload []byte
}

func valueCases() []valueCase {
	var cs []valueCase
	for _, id := range []uint32{0, 1, 127, 128, 16383, 16384, math.MaxUint32} {
		for _, exp := range []int64{NoExpiry, 0, 1, -2, math.MinInt64, math.MaxInt64} {
			for _, p := range [][]byte{nil, []byte("x"), {0x00, 0xff, 0x01}} {
				cs = append(cs, valueCase{Header{SchemaID: id, Expiry: exp}, p})
			}
		}
	}
	return cs
}

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range valueCases() {
		enc := EncodeValue(tc.h, tc.payload)
		h, p, err := DecodeValue(enc)
		if err != nil {
			t.Fatalf("DecodeValue(EncodeValue(%+v, %x)): %v", tc.h, tc.payload, err)
		}
		if h != tc.h || !bytes.Equal(p, tc.payload) {
			t.Fatalf("round trip of %+v, %x gave %+v, %x", tc.h, tc.payload, h, p)
		}
		if enc[0] != FormatVersion || (enc[1]&FlagExpiry != 0) != (tc.h.Expiry != NoExpiry) {
			t.Fatalf("header bytes %x for %+v", enc[:2], tc.h)
		}
		// AppendValue appends after existing bytes and leaves them alone.
		app := AppendValue([]byte("pre"), tc.h, tc.payload)
		if !bytes.Equal(app[:3], []byte("pre")) || !bytes.Equal(app[3:], enc) {
			t.Fatalf("AppendValue = %x, want pre+%x", app, enc)
		}
	}
	// An empty payload is still a value, never a tombstone.
	if v := EncodeValue(Header{Expiry: NoExpiry}, nil); v == nil || (Record{Value: v}).Tombstone() {
		t.Fatal("empty payload encoded as a tombstone")
	}
	if !(Record{Key: []byte("k")}).Tombstone() {
		t.Fatal("nil value must be a tombstone")
	}
}

var badValues = []struct {
	name string
	b    []byte
	want error
}{
	{"nil", nil, ErrBadValue},
	{"one byte", []byte{1}, ErrBadValue},
	{"two bytes", []byte{1, 0}, ErrBadValue},
	{"version 0", []byte{0, 0, 0}, ErrVersion},
	{"version 2", []byte{2, 0, 0, 'x'}, ErrVersion},
	{"unknown flag", []byte{1, 0x02, 0}, ErrBadValue},
	{"high flag", []byte{1, 0x80, 0}, ErrBadValue},
	{"truncated uvarint", []byte{1, 0, 0x80}, ErrBadValue},
	{"schema id above uint32", []byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, ErrBadValue},
	{"uvarint overflow", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, ErrBadValue},
	{"non-canonical schema id", []byte{1, 0, 0x80, 0x00}, ErrBadValue},
	{"non-canonical schema id 1", []byte{1, 0, 0x81, 0x80, 0x00, 'p'}, ErrBadValue},
	{"truncated expiry", []byte{1, 1, 0, 1, 2, 3}, ErrBadValue},
	{"expiry flag with no-expiry", []byte{1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, ErrBadValue},
}

func TestDecodeValueRejects(t *testing.T) {
	for _, tc := range badValues {
		t.Run(tc.name, func(t *testing.T) {
			h, p, err := DecodeValue(tc.b)
			if !errors.Is(err, tc.want) {
				t.Fatalf("DecodeValue(%x) = %+v, %x, %v; want %v", tc.b, h, p, err, tc.want)
			}
		})
	}
}

// Sanity of the test helper itself: sort order of encoded state keys
// follows (varID, len(groupKey), groupKey, suffix).
func TestStateKeyOrder(t *testing.T) {
	ks := [][]byte{
		StateKey(2, nil, nil), StateKey(1, []byte("b"), nil), StateKey(1, []byte("a"), listSuffix(2)),
		StateKey(1, []byte("a"), listSuffix(1)), StateKey(1, []byte("aa"), nil),
	}
	sort.Slice(ks, func(i, j int) bool { return bytes.Compare(ks[i], ks[j]) < 0 })
	var got []string
	for _, k := range ks {
		d, _ := DecodeKey(k)
		got = append(got, string(d.GroupKey)+"/"+string(rune('0'+d.VarID)))
	}
	want := []string{"a/1", "a/1", "b/1", "aa/1", "/2"}
	if !slices.Equal(got, want) {
		t.Fatalf("state key order %q, want %q", got, want)
	}
}

// listSuffix is a ListState element suffix: seq u64 big-endian.
func listSuffix(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
