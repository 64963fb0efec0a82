package keys_test

import (
	"bytes"
	"math"
	"slices"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
)

func TestUpperBounds(t *testing.T) {
	thresholds := []int64{math.MinInt64, math.MinInt64 + 1, -1, 0, 1, 1000, math.MaxInt64 - 1, math.MaxInt64}
	groupKeys := [][]byte{nil, {0x00}, bytes.Repeat([]byte{0xff}, 12)}
	for _, th := range thresholds {
		for _, e := range thresholds {
			for _, d := range []int64{-1, 0, 1} {
				exp := e + d
				if (d < 0 && exp > e) || (d > 0 && exp < e) {
					continue // overflow
				}
				for _, g := range groupKeys {
					in := bytes.Compare(changelogfmt.TimerKey(exp, g), keys.TimerUpperBound(th)) < 0
					if in != (exp <= th) {
						t.Fatalf("changelogfmt.TimerKey(%d,%x) < keys.TimerUpperBound(%d) = %v", exp, g, th, in)
					}
					sk := changelogfmt.StateKey(1, g, nil)
					in = bytes.Compare(changelogfmt.TTLKey(exp, sk), keys.TTLUpperBound(th)) < 0
					if in != (exp <= th) {
						t.Fatalf("changelogfmt.TTLKey(%d,%x) < keys.TTLUpperBound(%d) = %v", exp, sk, th, in)
					}
				}
			}
		}
		// Used with lower = KindPrefix, the bound must not reach into the next kind.
		if ub := keys.TimerUpperBound(th); bytes.Compare(ub, keys.KindPrefix(changelog.KindTimer)) <= 0 || bytes.Compare(ub, keys.KindPrefix(changelog.KindTimerKey)) > 0 {
			t.Fatalf("keys.TimerUpperBound(%d) = %x outside the timer space", th, ub)
		}
		if ub := keys.TTLUpperBound(th); bytes.Compare(ub, keys.KindPrefix(changelog.KindTTL)) <= 0 || bytes.Compare(ub, []byte{byte(changelog.KindTTL) + 1}) > 0 {
			t.Fatalf("keys.TTLUpperBound(%d) = %x outside the ttl space", th, ub)
		}
	}
}

// inPrefix reports whether k falls in the range [p, keys.PrefixEnd(p)).
func inPrefix(k, p []byte) bool {
	end := keys.PrefixEnd(p)
	return bytes.Compare(k, p) >= 0 && (end == nil || bytes.Compare(k, end) < 0)
}

func TestStateKeyPrefixContiguity(t *testing.T) {
	suffixes := [][]byte{nil, keys.ListSuffix(0), keys.ListSuffix(math.MaxUint64), []byte("c"), {0xff, 0xff}}
	pairs := [][2]string{{"ab", "abc"}, {"a", "a\x00"}, {"", "x"}, {"a\xff", "a\xff\xff"}, {"k", "k\x00\x00\x00\x01"}}
	for _, p := range pairs {
		short, long := []byte(p[0]), []byte(p[1])
		for _, v := range []uint32{0, 7, math.MaxUint32} {
			for _, s := range suffixes {
				if !inPrefix(changelogfmt.StateKey(v, short, s), keys.StateKeyPrefix(v, short)) {
					t.Fatalf("changelogfmt.StateKey(%d,%q,%x) outside its own group prefix", v, short, s)
				}
				if inPrefix(changelogfmt.StateKey(v, long, s), keys.StateKeyPrefix(v, short)) {
					t.Fatalf("changelogfmt.StateKey(%d,%q,%x) falls in the prefix of group key %q", v, long, s, short)
				}
				if inPrefix(changelogfmt.StateKey(v, short, s), keys.StateKeyPrefix(v, long)) {
					t.Fatalf("changelogfmt.StateKey(%d,%q,%x) falls in the prefix of group key %q", v, short, s, long)
				}
				if !inPrefix(changelogfmt.StateKey(v, long, s), keys.StatePrefix(v)) {
					t.Fatalf("changelogfmt.StateKey(%d,...) outside keys.StatePrefix(%d)", v, v)
				}
				if v < math.MaxUint32 && inPrefix(changelogfmt.StateKey(v+1, short, s), keys.StatePrefix(v)) {
					t.Fatalf("changelogfmt.StateKey(%d,...) inside keys.StatePrefix(%d)", v+1, v)
				}
			}
			for _, e := range []int64{math.MinInt64, 0, math.MaxInt64} {
				if inPrefix(changelogfmt.TimerByKey(long, e), keys.TimerByKeyPrefix(short)) || !inPrefix(changelogfmt.TimerByKey(short, e), keys.TimerByKeyPrefix(short)) {
					t.Fatalf("keys.TimerByKeyPrefix(%q) not contiguous against %q", short, long)
				}
			}
		}
	}
}

func TestPrefixEnd(t *testing.T) {
	cases := []struct{ in, want []byte }{
		{nil, nil},
		{[]byte{}, nil},
		{[]byte{0x00}, []byte{0x01}},
		{[]byte{0x01, 0x02}, []byte{0x01, 0x03}},
		{[]byte{0x01, 0xff}, []byte{0x02}},
		{[]byte{0x01, 0xff, 0xff}, []byte{0x02}},
		{[]byte{0xff}, nil},
		{[]byte{0xff, 0xff}, nil},
		{[]byte{0xfe, 0xff}, []byte{0xff}},
	}
	for _, tc := range cases {
		in := slices.Clone(tc.in)
		got := keys.PrefixEnd(in)
		if !bytes.Equal(got, tc.want) || (got == nil) != (tc.want == nil) {
			t.Errorf("keys.PrefixEnd(%x) = %x, want %x", tc.in, got, tc.want)
		}
		if !bytes.Equal(in, tc.in) {
			t.Errorf("PrefixEnd modified its input: %x -> %x", tc.in, in)
		}
	}
}

// TestAppendersMatchChangelog: the appending encoders the timers use with
// scratch buffers write exactly package changelog's keys.
func TestAppendersMatchChangelog(t *testing.T) {
	expiries := []int64{math.MinInt64, -1, 0, 1, 1_700_000_000_000, math.MaxInt64}
	groupKeys := [][]byte{nil, {}, {0x00}, []byte("alice"), bytes.Repeat([]byte{0xff}, 12)}
	dirty := []byte("left over")
	for _, e := range expiries {
		for _, g := range groupKeys {
			if got, want := keys.AppendTimerKey(dirty[:0], e, g), changelogfmt.TimerKey(e, g); !bytes.Equal(got, want) {
				t.Fatalf("AppendTimerKey(%d, %x) = %x, want %x", e, g, got, want)
			}
			if got, want := keys.AppendTimerByKey(dirty[:0], g, e), changelogfmt.TimerByKey(g, e); !bytes.Equal(got, want) {
				t.Fatalf("AppendTimerByKey(%x, %d) = %x, want %x", g, e, got, want)
			}
			if got, want := keys.AppendTimerByKeyPrefix(dirty[:0], g), keys.TimerByKeyPrefix(g); !bytes.Equal(got, want) {
				t.Fatalf("AppendTimerByKeyPrefix(%x) = %x, want %x", g, got, want)
			}
		}
	}
	for _, p := range [][]byte{nil, {0xff}, {0xff, 0xff}, {0x01}, {0x01, 0xff}, {0x00, 0xfe, 0xff}, []byte("abc")} {
		got, ok := keys.AppendPrefixEnd([]byte("x"), p)
		want := keys.PrefixEnd(p)
		if ok != (want != nil) || (ok && !bytes.Equal(got, append([]byte("x"), want...))) || (!ok && string(got) != "x") {
			t.Fatalf("AppendPrefixEnd(x, %x) = %x, %v; PrefixEnd = %x", p, got, ok, want)
		}
	}
}
