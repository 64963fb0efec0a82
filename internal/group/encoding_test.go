package group

import (
	"encoding/binary"
	"errors"
	"reflect"
	"testing"
	"time"
)

func TestMetaRoundTrip(t *testing.T) {
	m := Meta{Version: Version, InstanceID: "i1-p1", Process: "i1", Addr: "http://10.0.0.1:8080", Shards: map[int32]int64{0: 12, 7: 0, 3: 1 << 40},
		Standby: []int32{2, 5}}
	got, err := DecodeMeta(EncodeMeta(m))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, m) {
		t.Fatalf("got %+v, want %+v", got, m)
	}
	// Map order must not show: encode a copy built in another order.
	m2 := m
	m2.Shards = map[int32]int64{3: 1 << 40, 7: 0, 0: 12}
	if a, b := EncodeMeta(m), EncodeMeta(m2); string(a) != string(b) {
		t.Fatalf("encoding not deterministic: %x, %x", a, b)
	}
}

// TestMetaOfOlderRelease: a release before Meta.Standby ends its meta
// after Shards; it decodes with no standby copies.
func TestMetaOfOlderRelease(t *testing.T) {
	var e encoder
	e.uint(Version)
	e.str("i1")
	e.str("i1")
	e.str("")
	e.offsets(map[int32]int64{4: 7})
	got, err := DecodeMeta(e.b)
	if err != nil {
		t.Fatal(err)
	}
	if want := (Meta{Version: Version, InstanceID: "i1", Process: "i1", Shards: map[int32]int64{4: 7}}); !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
}

func testAssignment() Assignment {
	return Assignment{Version: Version, Standby: []int32{1, 4}, Warmup: []int32{2}, Probing: time.Minute,
		View: View{Generation: 9, LeaderID: "m1", Partitions: 6, At: time.Unix(0, 1_700_000_000_123_456_789),
			Members: []Member{
				{MemberID: "m1", InstanceID: "i1", Process: "i1", Addr: "http://a", Active: []int32{0, 3}, Standby: []int32{1, 4}, Warmup: []int32{2}, Lag: map[int32]int64{1: 0, 4: 3, 2: 900}},
				{MemberID: "m2", InstanceID: "i2", Process: "i2", Active: []int32{1, 2, 4, 5}},
			}}}
}

func TestAssignmentRoundTrip(t *testing.T) {
	a := testAssignment()
	got, err := DecodeAssignment(EncodeAssignment(a))
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got, a) {
		t.Fatalf("got %+v\nwant %+v", got, a)
	}
}

// newer re-encodes b as a newer release would: a higher version and a
// trailing field.
func newer(b []byte) []byte {
	_, n := binary.Uvarint(b)
	out := binary.AppendUvarint(nil, Version+1)
	out = append(out, b[n:]...)
	return append(out, 0x05, 'x', 'y', 'z', 'w', 'v')
}

// TestNewerVersionDecodes: a newer release's payload (higher version, more
// fields at the end, and more fields in each view member) decodes as far
// as this release knows it.
func TestNewerVersionDecodes(t *testing.T) {
	m := Meta{InstanceID: "i", Process: "p", Shards: map[int32]int64{1: 2}}
	got, err := DecodeMeta(newer(EncodeMeta(m)))
	if err != nil {
		t.Fatal(err)
	}
	if got.Version != Version+1 || got.InstanceID != "i" || got.Process != "p" || got.Shards[1] != 2 {
		t.Fatalf("newer meta decoded as %+v", got)
	}

	// A newer Member with a trailing field: encode members by hand.
	a := testAssignment()
	var e encoder
	e.uint(Version + 1)
	e.parts(a.Standby)
	e.parts(a.Warmup)
	e.int(int64(a.Probing))
	e.int(int64(a.View.Generation))
	e.str(a.View.LeaderID)
	e.int(int64(a.View.Partitions))
	e.int(a.View.At.UnixNano())
	e.uint(uint64(len(a.View.Members)))
	for _, m := range a.View.Members {
		var me encoder
		me.str(m.MemberID)
		me.str(m.InstanceID)
		me.str(m.Process)
		me.str(m.Addr)
		me.parts(m.Active)
		me.parts(m.Standby)
		me.parts(m.Warmup)
		me.offsets(m.Lag)
		me.str("a field of a newer release")
		e.bytes(me.b)
	}
	e.str("another one")
	got2, err := DecodeAssignment(e.b)
	if err != nil {
		t.Fatal(err)
	}
	a.Version = Version + 1
	if !reflect.DeepEqual(got2, a) {
		t.Fatalf("newer assignment decoded as %+v\nwant %+v", got2, a)
	}
}

func TestUndecodable(t *testing.T) {
	good := EncodeAssignment(testAssignment())
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version 0": {0, 1, 2},
		"truncated": good[:len(good)/2],
		"sticky":    {0, 1, 0, 0, 0, 1, 0, 2, 'i', 'n'}, // cooperative-sticky's UserData shape
	} {
		if _, err := DecodeAssignment(b); !errors.Is(err, ErrEncoding) {
			t.Errorf("assignment %s: err %v", name, err)
		}
		if _, err := DecodeMeta(b); !errors.Is(err, ErrEncoding) && name != "truncated" {
			t.Errorf("meta %s: err %v", name, err)
		}
	}
}

func FuzzDecode(f *testing.F) {
	f.Add(EncodeAssignment(testAssignment()))
	f.Add(EncodeMeta(Meta{InstanceID: "i", Shards: map[int32]int64{1: 1}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = DecodeMeta(b)
		_, _ = DecodeAssignment(b)
	})
}
