package changelog_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"slices"
	"sort"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
)

// encodeKey is the inverse of DecodeKey, built only from the encoders.
func encodeKey(k changelog.Key) []byte {
	switch k.Kind {
	case changelog.KindMeta:
		return changelogfmt.MetaKey(k.Name)
	case changelog.KindState:
		return changelogfmt.StateKey(k.VarID, k.GroupKey, k.Suffix)
	case changelog.KindTimer:
		return changelogfmt.TimerKey(k.Expiry, k.GroupKey)
	case changelog.KindTimerKey:
		return changelogfmt.TimerByKey(k.GroupKey, k.Expiry)
	case changelog.KindTTL:
		return changelogfmt.TTLKey(k.Expiry, k.StateKey)
	}
	return nil
}

type keyCase struct {
	name string
	key  []byte
	want changelog.Key
}

func keyCases() []keyCase {
	sk := changelogfmt.StateKey(3, []byte("user-1"), listSuffix(9))
	return []keyCase{
		{"meta", changelogfmt.MetaKey("var/count"), changelog.Key{Kind: changelog.KindMeta, Name: "var/count"}},
		{"meta empty", changelogfmt.MetaKey(""), changelog.Key{Kind: changelog.KindMeta}},
		{"meta binary", changelogfmt.MetaKey("\x00\xff"), changelog.Key{Kind: changelog.KindMeta, Name: "\x00\xff"}},
		{"value state", changelogfmt.StateKey(7, []byte("user-1"), nil), changelog.Key{Kind: changelog.KindState, VarID: 7, GroupKey: []byte("user-1")}},
		{"empty group key", changelogfmt.StateKey(7, nil, nil), changelog.Key{Kind: changelog.KindState, VarID: 7}},
		{"list state", changelogfmt.StateKey(math.MaxUint32, []byte("g"), listSuffix(3)),
			changelog.Key{Kind: changelog.KindState, VarID: math.MaxUint32, GroupKey: []byte("g"), Suffix: listSuffix(3)}},
		{"map state binary", changelogfmt.StateKey(1, []byte("g\x00\xff"), []byte("\x00mk\xff")),
			changelog.Key{Kind: changelog.KindState, VarID: 1, GroupKey: []byte("g\x00\xff"), Suffix: []byte("\x00mk\xff")}},
		{"timer", changelogfmt.TimerKey(1000, []byte("k")), changelog.Key{Kind: changelog.KindTimer, Expiry: 1000, GroupKey: []byte("k")}},
		{"timer negative", changelogfmt.TimerKey(-5, []byte("k")), changelog.Key{Kind: changelog.KindTimer, Expiry: -5, GroupKey: []byte("k")}},
		{"timer min", changelogfmt.TimerKey(math.MinInt64, nil), changelog.Key{Kind: changelog.KindTimer, Expiry: math.MinInt64}},
		{"timer max", changelogfmt.TimerKey(math.MaxInt64, []byte{0xff}), changelog.Key{Kind: changelog.KindTimer, Expiry: math.MaxInt64, GroupKey: []byte{0xff}}},
		{"timer by key", changelogfmt.TimerByKey([]byte("k"), 10), changelog.Key{Kind: changelog.KindTimerKey, Expiry: 10, GroupKey: []byte("k")}},
		{"timer by key empty", changelogfmt.TimerByKey(nil, -1), changelog.Key{Kind: changelog.KindTimerKey, Expiry: -1}},
		{"timer by key min", changelogfmt.TimerByKey([]byte("k\x00"), math.MinInt64), changelog.Key{Kind: changelog.KindTimerKey, Expiry: math.MinInt64, GroupKey: []byte("k\x00")}},
		{"ttl", changelogfmt.TTLKey(100, sk), changelog.Key{Kind: changelog.KindTTL, Expiry: 100, StateKey: sk}},
		{"ttl negative", changelogfmt.TTLKey(-100, changelogfmt.StateKey(0, nil, nil)), changelog.Key{Kind: changelog.KindTTL, Expiry: -100, StateKey: changelogfmt.StateKey(0, nil, nil)}},
	}
}

func TestKeyRoundTrip(t *testing.T) {
	for _, tc := range keyCases() {
		t.Run(tc.name, func(t *testing.T) {
			got, err := changelog.DecodeKey(tc.key)
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
			if got.Kind.String() == "" || changelog.Kind(0x09).String() != "kind(0x09)" {
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
	{"empty", nil, changelog.ErrShortKey},
	{"unknown kind", []byte{0x05, 1, 2}, changelog.ErrUnknownKind},
	// The shard's local offset key lives outside every kind on purpose: it
	// must never be accepted as a changelog key.
	{"local offset key", []byte("\xffoffset"), changelog.ErrUnknownKind},
	{"state short", []byte{0x01, 0, 0, 0, 1, 0, 0, 0}, changelog.ErrShortKey},
	{"state group key overruns", []byte{0x01, 0, 0, 0, 1, 0, 0, 0, 5, 'a', 'b'}, changelog.ErrShortKey},
	{"state huge group key length", []byte{0x01, 0, 0, 0, 1, 0xff, 0xff, 0xff, 0xff, 'a'}, changelog.ErrShortKey},
	{"timer short", []byte{0x02, 1, 2, 3, 4, 5, 6, 7}, changelog.ErrShortKey},
	{"timer by key short", []byte{0x03, 0, 0}, changelog.ErrShortKey},
	{"timer by key missing expiry", []byte{0x03, 0, 0, 0, 1, 'k', 0, 0, 0}, changelog.ErrShortKey},
	{"timer by key trailing bytes", append(changelogfmt.TimerByKey([]byte("k"), 1), 0), changelog.ErrShortKey},
	{"ttl short", []byte{0x04, 1, 2, 3}, changelog.ErrShortKey},
	{"ttl without state key", changelogfmt.TTLKey(1, nil), changelog.ErrShortKey},
	{"ttl pointing at a timer", changelogfmt.TTLKey(1, changelogfmt.TimerKey(1, []byte("k"))), changelog.ErrShortKey},
	{"ttl pointing at a truncated state key", changelogfmt.TTLKey(1, []byte{0x01, 0, 0}), changelog.ErrShortKey},
}

func TestDecodeKeyRejects(t *testing.T) {
	for _, tc := range badKeys {
		t.Run(tc.name, func(t *testing.T) {
			k, err := changelog.DecodeKey(tc.key)
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
		return bytes.Compare(changelogfmt.TimerKey(a.exp, []byte(a.key)), changelogfmt.TimerKey(b.exp, []byte(b.key)))
	})
	if !slices.Equal(got, want) {
		t.Fatalf("timer keys sort as %v\nwant %v", got, want)
	}
	// Every timer key stays inside the timer key space.
	lo, hi := []byte{byte(changelog.KindTimer)}, []byte{byte(changelog.KindTimer) + 1}
	for _, tm := range timers {
		k := changelogfmt.TimerKey(tm.exp, []byte(tm.key))
		if bytes.Compare(k, lo) < 0 || bytes.Compare(k, hi) >= 0 {
			t.Fatalf("TimerKey(%d,%q) = %x outside [%x,%x)", tm.exp, tm.key, k, lo, hi)
		}
	}
}

func TestTTLKeyOrder(t *testing.T) {
	exps := []int64{math.MinInt64, -2, -1, 0, 1, 1 << 40, math.MaxInt64}
	// A large state key at an earlier expiry must still sort first.
	big := changelogfmt.StateKey(math.MaxUint32, bytes.Repeat([]byte{0xff}, 20), []byte{0xff})
	small := changelogfmt.StateKey(0, nil, nil)
	var keys [][]byte
	for i := len(exps) - 1; i >= 0; i-- {
		keys = append(keys, changelogfmt.TTLKey(exps[i], small), changelogfmt.TTLKey(exps[i], big))
	}
	slices.SortFunc(keys, bytes.Compare)
	for i, k := range keys {
		d, err := changelog.DecodeKey(k)
		if err != nil {
			t.Fatal(err)
		}
		if d.Expiry != exps[i/2] {
			t.Fatalf("position %d holds expiry %d, want %d", i, d.Expiry, exps[i/2])
		}
	}
}

type valueCase struct {
	h       changelog.Header
	payload []byte
}

func valueCases() []valueCase {
	var cs []valueCase
	for _, id := range []uint32{0, 1, 127, 128, 16383, 16384, math.MaxUint32} {
		for _, exp := range []int64{changelog.NoExpiry, 0, 1, -2, math.MinInt64, math.MaxInt64} {
			for _, p := range [][]byte{nil, []byte("x"), {0x00, 0xff, 0x01}} {
				cs = append(cs, valueCase{changelog.Header{SchemaID: id, Expiry: exp}, p})
			}
		}
	}
	return cs
}

func TestValueRoundTrip(t *testing.T) {
	for _, tc := range valueCases() {
		enc := changelogfmt.EncodeValue(tc.h, tc.payload)
		h, p, err := changelog.DecodeValue(enc)
		if err != nil {
			t.Fatalf("DecodeValue(EncodeValue(%+v, %x)): %v", tc.h, tc.payload, err)
		}
		if h != tc.h || !bytes.Equal(p, tc.payload) {
			t.Fatalf("round trip of %+v, %x gave %+v, %x", tc.h, tc.payload, h, p)
		}
		if enc[0] != changelog.FormatVersion || (enc[1]&changelogfmt.FlagExpiry != 0) != (tc.h.Expiry != changelog.NoExpiry) {
			t.Fatalf("header bytes %x for %+v", enc[:2], tc.h)
		}
		// AppendValue appends after existing bytes and leaves them alone.
		app := changelogfmt.AppendValue([]byte("pre"), tc.h, tc.payload)
		if !bytes.Equal(app[:3], []byte("pre")) || !bytes.Equal(app[3:], enc) {
			t.Fatalf("AppendValue = %x, want pre+%x", app, enc)
		}
	}
	// An empty payload is still a value, never a tombstone.
	if v := changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, nil); v == nil || (changelog.Record{Value: v}).Tombstone() {
		t.Fatal("empty payload encoded as a tombstone")
	}
	if !(changelog.Record{Key: []byte("k")}).Tombstone() {
		t.Fatal("nil value must be a tombstone")
	}
}

var badValues = []struct {
	name string
	b    []byte
	want error
}{
	{"nil", nil, changelog.ErrBadValue},
	{"one byte", []byte{1}, changelog.ErrBadValue},
	{"two bytes", []byte{1, 0}, changelog.ErrBadValue},
	{"version 0", []byte{0, 0, 0}, changelog.ErrVersion},
	{"version 2", []byte{2, 0, 0, 'x'}, changelog.ErrVersion},
	{"unknown flag", []byte{1, 0x02, 0}, changelog.ErrBadValue},
	{"high flag", []byte{1, 0x80, 0}, changelog.ErrBadValue},
	{"truncated uvarint", []byte{1, 0, 0x80}, changelog.ErrBadValue},
	{"schema id above uint32", []byte{1, 0, 0x80, 0x80, 0x80, 0x80, 0x10}, changelog.ErrBadValue},
	{"uvarint overflow", []byte{1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01}, changelog.ErrBadValue},
	{"non-canonical schema id", []byte{1, 0, 0x80, 0x00}, changelog.ErrBadValue},
	{"non-canonical schema id 1", []byte{1, 0, 0x81, 0x80, 0x00, 'p'}, changelog.ErrBadValue},
	{"truncated expiry", []byte{1, 1, 0, 1, 2, 3}, changelog.ErrBadValue},
	{"expiry flag with no-expiry", []byte{1, 1, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff}, changelog.ErrBadValue},
}

func TestDecodeValueRejects(t *testing.T) {
	for _, tc := range badValues {
		t.Run(tc.name, func(t *testing.T) {
			h, p, err := changelog.DecodeValue(tc.b)
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
		changelogfmt.StateKey(2, nil, nil), changelogfmt.StateKey(1, []byte("b"), nil), changelogfmt.StateKey(1, []byte("a"), listSuffix(2)),
		changelogfmt.StateKey(1, []byte("a"), listSuffix(1)), changelogfmt.StateKey(1, []byte("aa"), nil),
	}
	sort.Slice(ks, func(i, j int) bool { return bytes.Compare(ks[i], ks[j]) < 0 })
	var got []string
	for _, k := range ks {
		d, _ := changelog.DecodeKey(k)
		got = append(got, string(d.GroupKey)+"/"+string(rune('0'+d.VarID)))
	}
	want := []string{"a/1", "a/1", "b/1", "aa/1", "/2"}
	if !slices.Equal(got, want) {
		t.Fatalf("state key order %q, want %q", got, want)
	}
}

// listSuffix is a ListState element suffix: seq u64 big-endian.
func listSuffix(seq uint64) []byte { return binary.BigEndian.AppendUint64(nil, seq) }
