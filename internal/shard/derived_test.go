package shard_test

import (
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
)

// The per-key timer index is local: batches of timer moves put none of its
// entries in the changelog, and a shard restored from that changelog (in
// chunks, as the restore and the standbys apply it) holds exactly what the
// writing shard holds, index included, and lists the same timers. So does
// a re-seed's Records, read back into a third shard.
func TestTimerIndexDerivedOnRestore(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 38))
	src := openMem(t, false)
	tm := timers.New(src)
	var l log
	keys := []string{"a", "bb", "c\x00d", "e"}
	for b := range 40 {
		recs := commit(t, src, &l, int64(b), func() {
			for range 1 + rng.IntN(6) {
				k := []byte(keys[rng.IntN(len(keys))])
				src.SetCurrentKey(k)
				ts := must[[]int64](t)(tm.List(k))
				if len(ts) > 0 && rng.IntN(3) > 0 {
					noErr(t, tm.Delete(k, ts[rng.IntN(len(ts))]))
				}
				if rng.IntN(4) > 0 {
					noErr(t, tm.Register(k, int64(rng.IntN(50))-10))
				}
			}
		})
		for _, r := range recs {
			if changelog.Kind(r.Key[0]) == changelog.KindTimerKey {
				t.Fatalf("batch %d: changelog record %x of the local timer index", b, r.Key)
			}
		}
	}
	want := dump(t, src)
	if n := entriesOfKind(want, changelog.KindTimerKey); n == 0 || n != entriesOfKind(want, changelog.KindTimer) {
		t.Fatalf("the writing shard has %d index entries for %d timers", n, entriesOfKind(want, changelog.KindTimer))
	}

	dst := openMem(t, false)
	for from := 0; from < len(l.recs); from += 7 {
		to := min(from+7, len(l.recs))
		noErr(t, dst.ApplyChangelog(l.recs[from:to], int64(to)))
	}
	checkSameTimers(t, "restored", dst, want, keys, src)

	noErr(t, src.BeginReseed())
	seed := must[[]changelog.Record](t)(src.Records())
	for _, r := range seed {
		if changelog.Kind(r.Key[0]) == changelog.KindTimerKey {
			t.Fatalf("Records: %x of the local timer index", r.Key)
		}
	}
	reseeded := openMem(t, false)
	noErr(t, reseeded.ApplyChangelog(seed, int64(len(seed))))
	checkSameTimers(t, "re-seeded", reseeded, want, keys, src)
}

// A changelog written before the index was local holds its entries too; a
// restore skips them, as one may be stale: here the index entry of a timer
// whose own tombstone the changelog kept (the index's tombstone was never
// written by a build that no longer changelogged it).
func TestTimerIndexOldChangelog(t *testing.T) {
	put := []byte{}
	recs := []changelog.Record{
		{Key: changelogfmt.TimerKey(10, []byte("k")), Value: put},
		{Key: changelogfmt.TimerByKey([]byte("k"), 10), Value: put},
		{Key: changelogfmt.TimerKey(20, []byte("k")), Value: put},
		{Key: changelogfmt.TimerByKey([]byte("k"), 20), Value: put},
		{Key: changelogfmt.TimerKey(10, []byte("k"))}, // deleted by a newer build
		{Key: changelogfmt.TimerByKey([]byte("gone"), 5), Value: put},
	}
	s := openMem(t, false)
	noErr(t, s.ApplyChangelog(recs, int64(len(recs))))
	got := dump(t, s)
	want := map[string]string{
		string(changelogfmt.TimerKey(20, []byte("k"))):   "",
		string(changelogfmt.TimerByKey([]byte("k"), 20)): "",
	}
	if !maps.Equal(got, want) {
		t.Fatalf("restored %q, want %q", got, want)
	}
	s.Begin(0)
	defer s.Abort()
	tm := timers.New(s)
	for k, w := range map[string][]int64{"k": {20}, "gone": nil} {
		if ts, err := tm.List([]byte(k)); err != nil || !slices.Equal(ts, w) {
			t.Errorf("List(%s) = %v, %v, want %v", k, ts, err, w)
		}
	}
}

func entriesOfKind(d map[string]string, k changelog.Kind) int {
	n := 0
	for key := range d {
		if changelog.Kind(key[0]) == k {
			n++
		}
	}
	return n
}

// checkSameTimers requires got to hold exactly want and to list the same
// timers per key as src.
func checkSameTimers(t *testing.T, what string, got *shard.Shard, want map[string]string, keys []string, src *shard.Shard) {
	t.Helper()
	if d := dump(t, got); !maps.Equal(d, want) {
		t.Fatalf("%s shard differs from the writer's:\n got %q\nwant %q", what, d, want)
	}
	got.Begin(0)
	defer got.Abort()
	src.Begin(0)
	defer src.Abort()
	a, b := timers.New(got), timers.New(src)
	for _, k := range keys {
		x := must[[]int64](t)(a.List([]byte(k)))
		y := must[[]int64](t)(b.List([]byte(k)))
		if !slices.Equal(x, y) {
			t.Errorf("%s: List(%q) = %v, the writer's %v", what, k, x, y)
		}
	}
}
