package shard

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
)

// untouched reports whether staging certainly holds no key in [lower,
// upper) by the unit rules sorted uses: the range lies inside one scan unit
// that no staged key is in.
func (s *staging) untouched(lower, upper []byte) bool {
	n := unitLen(lower)
	if n == 0 || !withinUnit(lower[:n], upper) {
		return false
	}
	return s.units[string(lower[:n])] == nil
}

// TestStagingUntouched checks the scan-unit rules that let a scan skip
// the skiplist: a range may only count as untouched when it lies inside
// one unit that holds no staged key.
func TestStagingUntouched(t *testing.T) {
	st := newStaging()
	list := keys.StateKeyPrefix(3, []byte("k1"))
	other := keys.StateKeyPrefix(3, []byte("k2"))
	ffUnit := keys.StateKeyPrefix(3, []byte{0xff, 0xff})
	timers := keys.TimerByKeyPrefix([]byte("k1"))
	st.set(append(list, 0, 0, 0, 0, 0, 0, 0, 1), []byte("v"))
	st.set(changelogfmt.TimerByKey([]byte("k2"), 7), []byte{})

	for _, tc := range []struct {
		name         string
		lower, upper []byte
		want         bool
	}{
		{"staged unit", list, keys.PrefixEnd(list), false},
		{"unstaged unit", other, keys.PrefixEnd(other), true},
		{"unstaged unit, upper inside it", other, append(other, 5), true},
		{"unit ending in 0xff", ffUnit, keys.PrefixEnd(ffUnit), true},
		{"upper beyond the unit", other, keys.PrefixEnd(keys.StatePrefix(3)), false},
		{"no upper bound", other, nil, false},
		{"timers of an unstaged key", timers, keys.PrefixEnd(timers), true},
		{"timers of a staged key", keys.TimerByKeyPrefix([]byte("k2")), keys.PrefixEnd(keys.TimerByKeyPrefix([]byte("k2"))), false},
		{"a variable's whole range", keys.StatePrefix(3), keys.PrefixEnd(keys.StatePrefix(3)), false},
		{"the timer index", keys.KindPrefix(changelog.KindTimer), keys.TimerUpperBound(9), false},
		{"malformed length", []byte{byte(changelog.KindState), 0, 0, 0, 3, 0, 0, 1, 0}, []byte{byte(changelog.KindState), 0, 0, 0, 4}, false},
	} {
		if got := st.untouched(tc.lower, tc.upper); got != tc.want {
			t.Errorf("%s: untouched(%x, %x) = %v, want %v", tc.name, tc.lower, tc.upper, got, tc.want)
		}
	}
	st.reset()
	if !st.untouched(list, keys.PrefixEnd(list)) {
		t.Errorf("after reset, the unit is still marked staged")
	}
}

// TestStagingModel checks the staging layer against a sorted map under
// random writes (unit and non-unit keys), savepoint rollbacks and ordered
// walks of unit ranges, of ranges of other kinds and of ranges across units.
func TestStagingModel(t *testing.T) {
	for seed := range uint64(20) {
		rng := rand.New(rand.NewPCG(seed, 7))
		st := newStaging()
		model := map[string]*string{} // key → value (nil: tombstone)
		type undo struct {
			key  string
			had  bool
			prev *string
		}
		var log []undo
		savepoint := -1
		groups := [][]byte{[]byte("a"), []byte("b"), []byte("bb"), {0xff}, []byte("c")}
		randKey := func() []byte {
			g := groups[rng.IntN(len(groups))]
			switch rng.IntN(5) {
			case 0:
				return changelogfmt.TimerKey(int64(rng.IntN(20)), g)
			case 1:
				return changelogfmt.TimerByKey(g, int64(rng.IntN(20)))
			case 2:
				return changelogfmt.MetaKey(fmt.Sprint("m", rng.IntN(5)))
			default:
				return changelogfmt.StateKey(uint32(1+rng.IntN(2)), g, []byte{byte(rng.IntN(6))})
			}
		}
		check := func(step int, lower, upper []byte) {
			var want []string
			for k, v := range model {
				if v != nil && k >= string(lower) && (upper == nil || k < string(upper)) {
					want = append(want, k)
				}
			}
			slices.Sort(want)
			list, skiplist := st.sorted(lower, upper)
			var got []string
			if skiplist {
				for e := st.seekGE(lower); e != nil && below(e.key, upper); e = e.next[0] {
					if !e.deleted {
						got = append(got, string(e.key))
					}
				}
			} else {
				for _, e := range list[searchGE(list, lower):] {
					if below(e.key, upper) && !e.deleted {
						got = append(got, string(e.key))
					}
				}
			}
			if !slices.Equal(got, want) {
				t.Fatalf("seed %d step %d: range [%x, %x): got %x, want %x", seed, step, lower, upper, got, want)
			}
		}
		for step := range 400 {
			switch op := rng.IntN(10); {
			case op < 6:
				k := randKey()
				var v []byte
				if rng.IntN(4) > 0 {
					v = []byte{byte(step)}
				}
				prev, had := model[string(k)]
				if savepoint >= 0 {
					log = append(log, undo{string(k), had, prev})
				}
				st.set(k, v)
				if v == nil {
					model[string(k)] = nil
				} else {
					s := string(v)
					model[string(k)] = &s
				}
			case op == 6 && savepoint < 0:
				savepoint, st.logUndo = len(st.undo), true
			case op == 7 && savepoint >= 0:
				st.rollback(savepoint)
				for i := len(log) - 1; i >= 0; i-- {
					if log[i].had {
						model[log[i].key] = log[i].prev
					} else {
						delete(model, log[i].key)
					}
				}
				log, savepoint, st.logUndo = nil, -1, false
			default:
				g := groups[rng.IntN(len(groups))]
				unit := keys.StateKeyPrefix(uint32(1+rng.IntN(2)), g)
				tk := keys.TimerByKeyPrefix(g)
				check(step, unit, keys.PrefixEnd(unit))
				check(step, tk, keys.PrefixEnd(tk))
				check(step, keys.KindPrefix(changelog.KindTimer), keys.TimerUpperBound(10))
				check(step, keys.StatePrefix(1), keys.PrefixEnd(keys.StatePrefix(2)))
				check(step, nil, nil)
			}
			for k := range model {
				if e := st.get([]byte(k)); e == nil {
					t.Fatalf("seed %d step %d: key %x not staged", seed, step, k)
				}
			}
			if st.len() != len(model) {
				t.Fatalf("seed %d step %d: %d staged, model has %d", seed, step, st.len(), len(model))
			}
		}
		all := st.ordered()
		if len(all) != len(model) || !slices.IsSortedFunc(all, func(a, b *stagedEntry) int { return bytes.Compare(a.key, b.key) }) {
			t.Fatalf("seed %d: ordered() has %d entries (model %d) or is not sorted", seed, len(all), len(model))
		}
	}
}

// TestKeepValueKeepsEmptyApart: an empty value is not a tombstone, also
// before the value chunk exists.
func TestKeepValueKeepsEmptyApart(t *testing.T) {
	s := newStaging()
	if v := s.keepValue([]byte{}); v == nil || len(v) != 0 {
		t.Fatalf("keepValue(empty) = %#v, want a non-nil empty slice", v)
	}
	if v := s.keepValue(nil); v != nil {
		t.Fatalf("keepValue(nil) = %#v, want nil", v)
	}
	a, b := s.keepValue([]byte("ab")), s.keepValue([]byte("cd"))
	if a = append(a, 'x'); string(a) != "abx" || string(b) != "cd" {
		t.Fatalf("appending to one kept value changed the next: %q, %q", a, b)
	}
}
