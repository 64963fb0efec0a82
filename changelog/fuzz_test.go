package changelog_test

import (
	"bytes"
	"encoding/binary"
	"errors"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
)

// FuzzDecodeKey: DecodeKey never panics, and whatever it accepts re-encodes
// to exactly the input, so two byte strings never decode to the same key
// (a shard key and its changelog record key must be one and the same).
func FuzzDecodeKey(f *testing.F) {
	for _, tc := range keyCases() {
		f.Add(tc.key)
	}
	for _, tc := range badKeys {
		f.Add(tc.key)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		k, err := changelog.DecodeKey(data)
		if err != nil {
			if k.Kind != 0 || k.GroupKey != nil || k.StateKey != nil {
				t.Fatalf("DecodeKey(%x) returned a partial key %+v with error %v", data, k, err)
			}
			return
		}
		if re := encodeKey(k); !bytes.Equal(re, data) {
			t.Fatalf("DecodeKey(%x) = %+v re-encodes to %x", data, k, re)
		}
	})
}

// FuzzDecodeValue: DecodeValue never panics, and every accepted value
// re-encodes to the same bytes (canonical header).
func FuzzDecodeValue(f *testing.F) {
	for _, tc := range valueCases() {
		f.Add(changelogfmt.EncodeValue(tc.h, tc.payload))
	}
	for _, tc := range badValues {
		f.Add(tc.b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		h, payload, err := changelog.DecodeValue(data)
		if err != nil {
			return
		}
		if re := changelogfmt.AppendValue(nil, h, payload); !bytes.Equal(re, data) {
			t.Fatalf("DecodeValue(%x) = %+v, %x re-encodes to %x", data, h, payload, re)
		}
	})
}

// FuzzTimerKeyOrder: timer index keys sort by (expiry, group key bytes),
// which is the order timers fire in.
func FuzzTimerKeyOrder(f *testing.F) {
	f.Add(int64(-1), []byte("a"), int64(1), []byte(""))
	f.Add(int64(5), []byte("a"), int64(5), []byte("a\x00"))
	f.Fuzz(func(t *testing.T, e1 int64, k1 []byte, e2 int64, k2 []byte) {
		want := cmpInt64(e1, e2)
		if want == 0 {
			want = bytes.Compare(k1, k2)
		}
		if got := bytes.Compare(changelogfmt.TimerKey(e1, k1), changelogfmt.TimerKey(e2, k2)); got != want {
			t.Fatalf("TimerKey(%d,%x) vs TimerKey(%d,%x): %d, want %d", e1, k1, e2, k2, got, want)
		}
		// The per-key index orders by expiry within one group key.
		if got := bytes.Compare(changelogfmt.TimerByKey(k1, e1), changelogfmt.TimerByKey(k1, e2)); got != cmpInt64(e1, e2) {
			t.Fatalf("TimerByKey(%x, %d vs %d): %d", k1, e1, e2, got)
		}
	})
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// FuzzDecodePacked: DecodePacked never panics, and the items it accepts
// re-frame to the same bytes (each uvarint(len) | item), so an accepted
// payload has exactly one reading. Overlong uvarint lengths re-frame
// shorter and are the one exception: the writer never makes them, and
// their items still lie inside the payload.
func FuzzDecodePacked(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{1, 'a', 0, 2, 'b', 'c'})
	f.Add([]byte{3, 'a'})          // overruns
	f.Add([]byte{0x80})            // truncated length
	f.Add([]byte{0x81, 0x00, 'x'}) // overlong length of 1
	f.Fuzz(func(t *testing.T, data []byte) {
		items, err := changelog.DecodePacked(data)
		if err != nil {
			if !errors.Is(err, changelog.ErrBadValue) {
				t.Fatalf("DecodePacked(%x): error %v does not wrap ErrBadValue", data, err)
			}
			return
		}
		var re []byte
		total := 0
		for _, it := range items {
			re = append(binary.AppendUvarint(re, uint64(len(it))), it...)
			total += len(it)
		}
		if total > len(data) || (len(re) == len(data) && !bytes.Equal(re, data)) {
			t.Fatalf("DecodePacked(%x) = %x re-frames to %x", data, items, re)
		}
	})
}
