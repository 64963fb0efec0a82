package timers_test

import (
	"bytes"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

func open(t *testing.T) *shard.Shard {
	t.Helper()
	s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

func noErr(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// batch runs fn in a committed batch and returns its changelog records.
// batch runs fn in a committed batch and returns its changelog records but
// the changelog layout entry, which a fresh shard's first batch holds.
func batch(t *testing.T, s *shard.Shard, fn func()) []changelog.Record {
	t.Helper()
	s.Begin(0)
	fn()
	recs, err := s.Finish()
	noErr(t, err)
	noErr(t, s.Commit(s.ChangelogOffset()+int64(len(recs))))
	return slices.DeleteFunc(slices.Clone(recs), func(r changelog.Record) bool {
		return bytes.Equal(r.Key, changelogfmt.MetaKey(changelog.LayoutMeta))
	})
}

func render(ts []timers.Timer) []string {
	var out []string
	for _, x := range ts {
		out = append(out, string(x.Key)+"@"+itoa(x.Expiry))
	}
	return out
}

func itoa(v int64) string {
	if v < 0 {
		return "-" + itoa(-v)
	}
	if v < 10 {
		return string(rune('0' + v))
	}
	return itoa(v/10) + string(rune('0'+v%10))
}

func TestExpiredOrder(t *testing.T) {
	s := open(t)
	tm := timers.New(s)
	regs := []struct {
		key    string
		expiry int64
	}{{"b", 5}, {"a", 5}, {"c", 1}, {"a", 9}, {"ab", 5}, {"", 5}, {"z", -3}, {"a", 5} /* duplicate */}
	// Half committed, half staged: Expired must merge both in order.
	batch(t, s, func() {
		for _, r := range regs[:4] {
			noErr(t, tm.Register([]byte(r.key), r.expiry))
		}
	})
	s.Begin(0)
	for _, r := range regs[4:] {
		noErr(t, tm.Register([]byte(r.key), r.expiry))
	}
	for _, tc := range []struct {
		threshold int64
		want      []string
	}{
		{-4, nil},
		{-3, []string{"z@-3"}},
		{4, []string{"z@-3", "c@1"}},
		{5, []string{"z@-3", "c@1", "@5", "a@5", "ab@5", "b@5"}},
		{math.MaxInt64, []string{"z@-3", "c@1", "@5", "a@5", "ab@5", "b@5", "a@9"}},
	} {
		got, err := tm.Expired(tc.threshold)
		noErr(t, err)
		if !slices.Equal(render(got), tc.want) {
			t.Errorf("Expired(%d) = %q, want %q", tc.threshold, render(got), tc.want)
		}
	}
	list, err := tm.List([]byte("a"))
	noErr(t, err)
	if !slices.Equal(list, []int64{5, 9}) {
		t.Fatalf("List(a) = %v", list)
	}
	if list, _ := tm.List([]byte("nobody")); len(list) != 0 {
		t.Fatalf("List(nobody) = %v", list)
	}
	s.Abort()
}

func TestRegisterDeleteIdempotent(t *testing.T) {
	s := open(t)
	tm := timers.New(s)
	recs := batch(t, s, func() {
		noErr(t, tm.Register([]byte("k"), 10))
		noErr(t, tm.Register([]byte("k"), 10))
		noErr(t, tm.Delete([]byte("k"), 99)) // absent: no-op
	})
	if len(recs) != 1 { // the timer once; its per-key index entry is local
		t.Fatalf("records = %d, want 1", len(recs))
	}
	if st := tm.Stats(); st.Registered != 1 || st.Deleted != 0 {
		t.Fatalf("Stats = %+v", st)
	}
	s.Begin(0)
	if ok, _ := tm.Exists([]byte("k"), 10); !ok {
		t.Fatal("registered timer does not exist")
	}
	noErr(t, tm.Delete([]byte("k"), 10))
	if ok, _ := tm.Exists([]byte("k"), 10); ok {
		t.Fatal("deleted timer still exists")
	}
	recs, err := s.Finish()
	noErr(t, err)
	if len(recs) != 1 || !recs[0].Tombstone() {
		t.Fatalf("delete records = %+v", recs)
	}
	noErr(t, s.Commit(4))
	if st := tm.Stats(); st.Registered != 1 || st.Deleted != 1 {
		t.Fatalf("Stats = %+v", st)
	}
	// Aborted work is not counted.
	s.Begin(0)
	noErr(t, tm.Register([]byte("x"), 1))
	s.Abort()
	if st := tm.Stats(); st.Registered != 1 {
		t.Fatalf("Stats after abort = %+v", st)
	}
}

func TestTimersSurviveRestore(t *testing.T) {
	src := open(t)
	var log []changelog.Record
	tm := timers.New(src)
	log = append(log, batch(t, src, func() {
		noErr(t, tm.Register([]byte("a"), 3))
		noErr(t, tm.Register([]byte("b"), 1))
		noErr(t, tm.Register([]byte("a"), 7))
	})...)
	log = append(log, batch(t, src, func() { noErr(t, tm.Delete([]byte("a"), 3)) })...)
	dst := open(t)
	noErr(t, dst.ApplyChangelog(log, int64(len(log))))
	got, err := timers.New(dst).Expired(100)
	noErr(t, err)
	if !slices.Equal(render(got), []string{"b@1", "a@7"}) {
		t.Fatalf("restored timers = %q", render(got))
	}
}

func TestTimersMisuse(t *testing.T) {
	s := open(t)
	tm := timers.New(s)
	err := tm.Register([]byte("k"), 5)
	if !errors.Is(err, state.ErrNoBatch) || !strings.Contains(err.Error(), "Register") || !strings.Contains(err.Error(), `"k"`) {
		t.Fatalf("Register outside a batch: %v", err)
	}
	s.Close()
	if _, err := tm.Expired(1); !errors.Is(err, state.ErrClosed) || !strings.Contains(err.Error(), "Expired") {
		t.Fatalf("Expired after Close: %v", err)
	}
}

// TestFloor: Expired starts at the shard's timer floor; the floor must stay
// a true lower bound across commits, aborts, past registrations and restore.
func TestFloor(t *testing.T) {
	s := open(t)
	tm := timers.New(s)
	batch(t, s, func() {
		for e := int64(1); e <= 100; e++ {
			noErr(t, tm.Register([]byte("k"), e))
		}
	})
	fire := func(now int64) []string {
		fired, err := tm.Expired(now)
		noErr(t, err)
		for _, f := range fired {
			noErr(t, tm.Delete(f.Key, f.Expiry))
		}
		return render(fired)
	}
	batch(t, s, func() {
		if got := fire(50); len(got) != 50 {
			t.Fatalf("fired %d timers at 50", len(got))
		}
	})
	if f := s.TimerFloor(); f != 51 {
		t.Fatalf("TimerFloor after firing up to 50 = %d, want 51", f)
	}
	// Fire and abort: the timers come back and still fire later.
	s.Begin(0)
	if got := fire(60); len(got) != 10 {
		t.Fatalf("fired %d timers at 60", len(got))
	}
	s.Abort()
	// A timer registered in the past (below the floor) fires.
	s.Begin(0)
	noErr(t, tm.Register([]byte("late"), 7))
	if got := fire(55); !slices.Equal(got, []string{"late@7", "k@51", "k@52", "k@53", "k@54", "k@55"}) {
		t.Fatalf("fired at 55 = %q", got)
	}
	recs, err := s.Finish()
	noErr(t, err)
	noErr(t, s.Commit(s.ChangelogOffset()+int64(len(recs))))
	batch(t, s, func() {
		if got := fire(1000); len(got) != 45 {
			t.Fatalf("fired %d timers at 1000, want 45", len(got))
		}
	})
	batch(t, s, func() { noErr(t, tm.Register([]byte("again"), -5)) })
	s.Begin(0)
	if got := fire(0); !slices.Equal(got, []string{"again@-5"}) {
		t.Fatalf("fired at 0 after the space was empty = %q", got)
	}
	s.Abort()
}

// TestListCacheStaysExact checks the List cache of one handler call's
// "list, delete, register" against the store: every answer must equal what
// a fresh Timers (no cache) reads, also when another writer of the timer
// key spaces, a savepoint rollback or a batch boundary comes in between.
func TestListCacheStaysExact(t *testing.T) {
	s := open(t)
	a := timers.New(s)
	key := []byte("k")
	fresh := func() []int64 {
		t.Helper()
		got, err := timers.New(s).List(key)
		noErr(t, err)
		return got
	}
	same := func(what string) {
		t.Helper()
		got, err := a.List(key)
		noErr(t, err)
		if want := fresh(); !slices.Equal(got, want) {
			t.Fatalf("%s: cached List = %v, store says %v", what, got, want)
		}
	}
	batch(t, s, func() {
		noErr(t, a.Register(key, 10))
		noErr(t, a.Register(key, 30))
	})
	s.Begin(0)
	same("first List")
	noErr(t, a.Delete(key, 10))
	same("after Delete")
	noErr(t, a.Register(key, 20))
	noErr(t, a.Register(key, 20)) // a no-op: exists from the cache
	same("after Register")
	if ok, err := a.Exists(key, 10); err != nil || ok {
		t.Fatalf("Exists(10) after Delete = %v, %v", ok, err)
	}
	// Another writer (the engine deleting a fired timer with its own Timers).
	noErr(t, timers.New(s).Delete(key, 30))
	noErr(t, timers.New(s).Register(key, 40))
	same("after another Timers wrote")
	if ok, err := a.Exists(key, 30); err != nil || ok {
		t.Fatalf("Exists(30) after another Timers deleted it = %v, %v", ok, err)
	}
	// A rollback unstages writes the cache saw.
	sp, err := s.Savepoint()
	noErr(t, err)
	same("before the savepoint's writes")
	noErr(t, a.Register(key, 50))
	noErr(t, s.RollbackTo(sp))
	same("after RollbackTo")
	noErr(t, a.Delete(key, 50)) // gone with the rollback: a no-op
	s.Abort()
	s.Begin(0)
	same("after Abort")
	if got := fresh(); !slices.Equal(got, []int64{10, 30}) {
		t.Fatalf("after Abort the committed timers are %v, want [10 30]", got)
	}
	recs, err := s.Finish()
	noErr(t, err)
	noErr(t, s.Commit(s.ChangelogOffset()+int64(len(recs))))
	// The deleted and registered timers' changelog records are exact: a
	// Delete answered from the cache still writes the timer's tombstone
	// (the per-key index is local: not in the changelog).
	recs = batch(t, s, func() {
		same("new batch")
		noErr(t, a.Delete(key, 10))
		noErr(t, a.Register(key, 11))
	})
	var puts, dels int
	for _, r := range recs {
		if r.Value == nil {
			dels++
		} else {
			puts++
		}
	}
	if puts != 1 || dels != 1 {
		t.Fatalf("Delete+Register gave %d puts and %d tombstones, want 1 and 1: %v", puts, dels, recs)
	}
	s.Begin(0)
	same("after commit")
	if got := fresh(); !slices.Equal(got, []int64{11, 30}) {
		t.Fatalf("timers %v, want [11 30]", got)
	}
	s.Abort()
}
