package shard_test

import (
	"bytes"
	"cmp"
	"fmt"
	"maps"
	"math/rand/v2"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/keys"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/state"
)

// The model test runs random operations on value, list and map variables
// (some with TTL) and timers across grouping keys, with batches that
// commit, abort or crash, and compares every read with a plain in-memory
// model. Every committed batch's records form "the changelog"; a crash
// reopens either a fresh empty shard restored from the whole changelog
// (sometimes twice, sometimes in overlapping chunks) or the old directory
// restored from its stored offset, which proves that local state plus the
// offset survive and that replay is idempotent.

const (
	ttlV1 = 50 // ms
	ttlL1 = 80
	ttlM1 = 60
)

type mItem[T any] struct {
	v   T
	exp int64 // -1: none
}

func live(exp, now int64) bool { return exp < 0 || exp > now }

// model is the expected content of the shard (expired entries included
// until the model's Finish removes them, like the shard).
type model struct {
	v      [2]map[string]mItem[int64]
	l      [2]map[string][]mItem[string]
	m0     map[string]map[int64]mItem[string]
	m1     map[string]map[string]mItem[float64]
	timers map[string]map[int64]bool
}

func newModel() *model {
	m := &model{m0: map[string]map[int64]mItem[string]{}, m1: map[string]map[string]mItem[float64]{}, timers: map[string]map[int64]bool{}}
	for i := range 2 {
		m.v[i] = map[string]mItem[int64]{}
		m.l[i] = map[string][]mItem[string]{}
	}
	return m
}

func (m *model) clone() *model {
	c := newModel()
	for i := range 2 {
		c.v[i] = maps.Clone(m.v[i])
		for k, l := range m.l[i] {
			c.l[i][k] = slices.Clone(l)
		}
	}
	for k, mm := range m.m0 {
		c.m0[k] = maps.Clone(mm)
	}
	for k, mm := range m.m1 {
		c.m1[k] = maps.Clone(mm)
	}
	for k, ts := range m.timers {
		c.timers[k] = maps.Clone(ts)
	}
	return c
}

// expire drops entries expired at now (what Finish does in the shard).
func (m *model) expire(now int64) {
	for i := range 2 {
		maps.DeleteFunc(m.v[i], func(_ string, it mItem[int64]) bool { return !live(it.exp, now) })
		for k, l := range m.l[i] {
			l = slices.DeleteFunc(l, func(it mItem[string]) bool { return !live(it.exp, now) })
			if len(l) == 0 {
				delete(m.l[i], k)
			} else {
				m.l[i][k] = l
			}
		}
	}
	for k, mm := range m.m0 {
		maps.DeleteFunc(mm, func(_ int64, it mItem[string]) bool { return !live(it.exp, now) })
		if len(mm) == 0 {
			delete(m.m0, k)
		}
	}
	for k, mm := range m.m1 {
		maps.DeleteFunc(mm, func(_ string, it mItem[float64]) bool { return !live(it.exp, now) })
		if len(mm) == 0 {
			delete(m.m1, k)
		}
	}
}

// vars are the shard's declared variables.
type vars struct {
	v  [2]state.ValueState[int64]
	l  [2]state.ListState[string]
	m0 state.MapState[int64, string]
	m1 state.MapState[string, float64]
	tm *timers.Timers
}

type modelRun struct {
	t          *testing.T
	rng        *rand.Rand
	log        log
	now        int64
	s          *shard.Shard
	vs         vars
	durable    *model // committed (in the changelog and, after Commit, in the store)
	pending    *model // durable + staged declarations (DeleteIfExists)
	work       *model // pending + the batch in progress
	fresh      func(wb int64) (*shard.Shard, error)
	reopen     func(wb int64) (*shard.Shard, error) // the old "directory"
	closeOld   func()                               // releases the old directory's resources
	ops        int
	savepoints int // rollbacks done
	restarts   map[string]int
	// served counts the reads prefetched values answered (servedSeen of
	// them on servedShard).
	served, servedSeen int
	servedShard        *shard.Shard
}

var modelKeys = []string{"", "a", "b", "ab", "k\x00"}

func (r *modelRun) fatalf(format string, args ...any) {
	r.t.Helper()
	r.t.Fatalf("op %d, time %d: %s", r.ops, r.now, fmt.Sprintf(format, args...))
}

func (r *modelRun) check(err error) {
	r.t.Helper()
	if err != nil {
		r.fatalf("%v", err)
	}
}

func (r *modelRun) declare(drop bool) {
	s := r.s
	s.SetDeclaring(true)
	defer s.SetDeclaring(false)
	var err error
	if drop {
		// Drop v0 and m1 (a TTL map) and re-declare them empty.
		r.check(s.DeleteIfExists("v0"))
		r.check(s.DeleteIfExists("m1"))
		r.pending.v[0] = map[string]mItem[int64]{}
		r.pending.m1 = map[string]map[string]mItem[float64]{}
		r.work = r.pending.clone()
	}
	r.vs.v[0], err = shard.NewValueState(s, "v0", state.Int64())
	r.check(err)
	r.vs.v[1], err = shard.NewValueState(s, "v1", state.Int64(), state.WithTTL(ttlV1*time.Millisecond))
	r.check(err)
	r.vs.l[0], err = shard.NewListState(s, "l0", state.String())
	r.check(err)
	r.vs.l[1], err = shard.NewListState(s, "l1", state.String(), state.WithTTL(ttlL1*time.Millisecond))
	r.check(err)
	r.vs.m0, err = shard.NewMapState(s, "m0", state.Int64(), state.String())
	r.check(err)
	r.vs.m1, err = shard.NewMapState(s, "m1", state.String(), state.Float64(), state.WithTTL(ttlM1*time.Millisecond))
	r.check(err)
	r.vs.tm = timers.New(s)
}

// writeBehind picks a shard's ShardOptions.WriteBehindBytes: off, so small
// that most commits flush, or large enough that only scans, restarts and
// the record bound flush.
func (r *modelRun) writeBehind() int64 {
	return []int64{0, 300, 1 << 20}[r.rng.IntN(3)]
}

// restart crashes the shard and brings it back from the changelog.
// fromKafka: the model state the changelog holds.
func (r *modelRun) restart(fromKafka *model) {
	if r.rng.IntN(2) == 0 {
		r.check(r.s.Close()) // a clean stop: the write-behind layer is flushed
		r.restarts["closed"]++
	} else {
		// A kill: the write-behind layer is lost; the store has the state
		// and offset of its last flush.
		if shard.StoredOffsetForTest(r.s) < r.s.ChangelogOffset() {
			r.restarts["killed-unflushed"]++
		}
		r.check(shard.CrashForTest(r.s))
		r.restarts["killed"]++
	}
	var s *shard.Shard
	var err error
	switch mode := r.rng.IntN(4); mode {
	case 0, 1: // fresh shard, whole changelog (mode 1: twice)
		r.closeOld()
		s, err = r.fresh(r.writeBehind())
		r.check(err)
		r.check(s.ApplyChangelog(r.log.recs, r.log.next()))
		if mode == 1 {
			r.check(s.ApplyChangelog(r.log.recs, r.log.next()))
			r.restarts["fresh-twice"]++
		} else {
			r.restarts["fresh"]++
		}
	case 2: // fresh shard, overlapping chunks
		r.closeOld()
		s, err = r.fresh(r.writeBehind())
		r.check(err)
		for start := 0; start < len(r.log.recs); {
			end := min(len(r.log.recs), start+1+r.rng.IntN(50))
			r.check(s.ApplyChangelog(r.log.recs[start:end], int64(end)))
			start = max(0, end-r.rng.IntN(5)) // replay a few records again
			if end == len(r.log.recs) {
				break
			}
		}
		r.restarts["fresh-chunks"]++
	case 3: // the old directory: local state + offset, then the tail
		s, err = r.reopen(r.writeBehind())
		r.check(err)
		from := s.ChangelogOffset()
		if from > r.log.next() {
			r.fatalf("stored offset %d is past the changelog end %d", from, r.log.next())
		}
		r.check(s.ApplyChangelog(r.log.recs[from:], r.log.next()))
		if from < r.log.next() {
			r.restarts["old-dir-with-tail"]++
		} else {
			r.restarts["old-dir"]++
		}
	}
	if s.ChangelogOffset() != r.log.next() {
		r.fatalf("offset after restore = %d, want %d", s.ChangelogOffset(), r.log.next())
	}
	r.s = s
	r.durable = fromKafka.clone()
	r.pending = r.durable.clone()
	r.work = r.durable.clone()
	r.declare(r.rng.IntN(8) == 0)
	r.verifyAll()
}

// verifyAll compares every variable of every key, in a throw-away batch.
func (r *modelRun) verifyAll() {
	r.s.Begin(r.now)
	r.prefetch()
	for _, k := range modelKeys {
		r.s.SetCurrentKey([]byte(k))
		for i := range 2 {
			r.readValue(i, k)
			r.readList(i, k)
		}
		r.readMap0(k)
		r.readMap1(k)
		r.readTimers(k)
	}
	r.readExpired()
	r.s.Abort()
	r.work = r.pending.clone()
}

// prefetch reads ahead the state of every key that a read past the
// cache has touched (shard.Prefetch), as the engine does for a batch's
// keys; the batch's reads are then checked against the model as before.
// Some batches do not prefetch: the values of the last one must not
// serve them.
func (r *modelRun) prefetch() {
	if r.rng.IntN(4) == 0 {
		return
	}
	shard.PrefetchAllForTest(r.s)
	ks := make([][]byte, 0, len(modelKeys))
	for _, i := range r.rng.Perm(len(modelKeys)) {
		ks = append(ks, []byte(modelKeys[i]))
	}
	if r.servedShard != r.s {
		r.servedShard, r.servedSeen = r.s, 0
	}
	n := shard.PrefetchServedForTest(r.s)
	r.served += n - r.servedSeen
	r.servedSeen = n
	r.check(r.s.Prefetch(ks))
}

func (r *modelRun) readValue(i int, k string) {
	got, ok, err := r.vs.v[i].Get()
	r.check(err)
	ex, err := r.vs.v[i].Exists()
	r.check(err)
	it, has := r.work.v[i][k]
	want := has && live(it.exp, r.now)
	if ok != want || ex != want || (want && got != it.v) {
		r.fatalf("v%d[%q]: Get = %d, %v, Exists %v; model %+v (present %v)", i, k, got, ok, ex, it, has)
	}
}

func (r *modelRun) readList(i int, k string) {
	seq, err := r.vs.l[i].Get()
	r.check(err)
	got := slices.Collect(seq)
	var want []string
	for _, it := range r.work.l[i][k] {
		if live(it.exp, r.now) {
			want = append(want, it.v)
		}
	}
	ex, err := r.vs.l[i].Exists()
	r.check(err)
	if !slices.Equal(got, want) || ex != (len(want) > 0) {
		r.fatalf("l%d[%q]: Get = %q, Exists %v; want %q", i, k, got, ex, want)
	}
}

func (r *modelRun) readMap0(k string) {
	it, err := r.vs.m0.Iterator()
	r.check(err)
	var got, want []string
	for mk, v := range it {
		got = append(got, fmt.Sprint(mk, "=", v))
	}
	for _, mk := range slices.Sorted(maps.Keys(r.work.m0[k])) {
		if e := r.work.m0[k][mk]; live(e.exp, r.now) {
			want = append(want, fmt.Sprint(mk, "=", e.v))
		}
	}
	ex, err := r.vs.m0.Exists()
	r.check(err)
	if !slices.Equal(got, want) || ex != (len(want) > 0) {
		r.fatalf("m0[%q]: Iterator = %q, Exists %v; want %q", k, got, ex, want)
	}
}

func (r *modelRun) readMap1(k string) {
	keys, err := r.vs.m1.Keys()
	r.check(err)
	vals, err := r.vs.m1.Values()
	r.check(err)
	gotK, gotV := slices.Collect(keys), slices.Collect(vals)
	var wantK []string
	var wantV []float64
	for _, mk := range slices.Sorted(maps.Keys(r.work.m1[k])) {
		if e := r.work.m1[k][mk]; live(e.exp, r.now) {
			wantK, wantV = append(wantK, mk), append(wantV, e.v)
		}
	}
	if !slices.Equal(gotK, wantK) || !slices.Equal(gotV, wantV) {
		r.fatalf("m1[%q]: Keys = %q, Values = %v; want %q, %v", k, gotK, gotV, wantK, wantV)
	}
}

func (r *modelRun) readTimers(k string) {
	got, err := r.vs.tm.List([]byte(k))
	r.check(err)
	want := slices.Sorted(maps.Keys(r.work.timers[k]))
	if !slices.Equal(got, want) {
		r.fatalf("timers of %q = %v, want %v", k, got, want)
	}
}

func (r *modelRun) modelExpired(threshold int64) []timers.Timer {
	var want []timers.Timer
	for k, ts := range r.work.timers {
		for e := range ts {
			if e <= threshold {
				want = append(want, timers.Timer{Key: []byte(k), Expiry: e})
			}
		}
	}
	slices.SortFunc(want, func(a, b timers.Timer) int {
		return cmp.Or(cmp.Compare(a.Expiry, b.Expiry), bytes.Compare(a.Key, b.Key))
	})
	return want
}

func (r *modelRun) readExpired() []timers.Timer {
	got, err := r.vs.tm.Expired(r.now)
	r.check(err)
	want := r.modelExpired(r.now)
	if !slices.EqualFunc(got, want, func(a, b timers.Timer) bool { return a.Expiry == b.Expiry && bytes.Equal(a.Key, b.Key) }) {
		r.fatalf("Expired(%d) = %v, want %v", r.now, got, want)
	}
	return got
}

func (r *modelRun) exp(ttl int64) int64 {
	if ttl == 0 {
		return -1
	}
	return r.now + ttl
}

// randomOp runs one random operation. pointOnly restricts it to point
// reads and writes of variables without TTL (v0, m0 entries): batches of
// those commit into the write-behind layer without a scan flushing it.
func (r *modelRun) randomOp(pointOnly bool) {
	r.ops++
	k := modelKeys[r.rng.IntN(len(modelKeys))]
	r.s.SetCurrentKey([]byte(k))
	w := r.work
	op := r.rng.IntN(9)
	if pointOnly {
		op = []int{0, 4}[r.rng.IntN(2)]
	}
	switch op {
	case 0, 1: // value
		i := r.rng.IntN(2)
		if pointOnly {
			i = 0
		}
		ttl := [2]int64{0, ttlV1}[i]
		switch r.rng.IntN(4) {
		case 0, 1:
			v := r.rng.Int64N(1000) - 500
			r.check(r.vs.v[i].Update(v))
			w.v[i][k] = mItem[int64]{v, r.exp(ttl)}
		case 2:
			r.check(r.vs.v[i].Clear())
			delete(w.v[i], k)
		case 3:
			r.readValue(i, k)
		}
	case 2, 3: // list
		i := r.rng.IntN(2)
		ttl := [2]int64{0, ttlL1}[i]
		newElems := func() []string {
			out := make([]string, 1+r.rng.IntN(3))
			for j := range out {
				out[j] = fmt.Sprintf("e%d", r.rng.IntN(100))
			}
			return out
		}
		items := func(vs []string) []mItem[string] {
			var out []mItem[string]
			for _, v := range vs {
				out = append(out, mItem[string]{v, r.exp(ttl)})
			}
			return out
		}
		switch r.rng.IntN(6) {
		case 0:
			vs := newElems()
			if r.rng.IntN(2) == 0 {
				// The read-modify-Put of a sliding window: Get, then
				// Put the list without its first elements plus new
				// ones (Put may keep the run in place; the memo of the
				// Get is what it reuses).
				seq, err := r.vs.l[i].Get()
				r.check(err)
				cur := slices.Collect(seq)
				drop := r.rng.IntN(len(cur) + 1)
				vs = append(slices.Clone(cur[drop:]), vs[:r.rng.IntN(len(vs)+1)]...)
				if len(vs) == 0 {
					vs = newElems()
				}
			}
			r.check(r.vs.l[i].Put(vs))
			w.l[i][k] = items(vs)
		case 1:
			v := newElems()[0]
			r.check(r.vs.l[i].AppendValue(v))
			w.l[i][k] = append(w.l[i][k], items([]string{v})...)
		case 2:
			vs := newElems()
			r.check(r.vs.l[i].AppendList(vs))
			w.l[i][k] = append(w.l[i][k], items(vs)...)
		case 3:
			if r.rng.IntN(3) == 0 {
				r.check(r.vs.l[i].Clear())
				delete(w.l[i], k)
			}
		default:
			r.readList(i, k)
		}
	case 4, 5: // map m0: int64 keys incl. negatives, no TTL
		mk := r.rng.Int64N(21) - 10
		mop := r.rng.IntN(6)
		if pointOnly {
			mop = []int{0, 1, 2, 4}[r.rng.IntN(4)]
		}
		switch mop {
		case 0, 1:
			v := fmt.Sprintf("s%d", r.rng.IntN(50))
			r.check(r.vs.m0.UpdateValue(mk, v))
			if w.m0[k] == nil {
				w.m0[k] = map[int64]mItem[string]{}
			}
			w.m0[k][mk] = mItem[string]{v, -1}
		case 2:
			r.check(r.vs.m0.RemoveKey(mk))
			delete(w.m0[k], mk)
		case 3:
			if r.rng.IntN(4) == 0 {
				r.check(r.vs.m0.Clear())
				delete(w.m0, k)
			}
		case 4:
			got, ok, err := r.vs.m0.GetValue(mk)
			r.check(err)
			c, err := r.vs.m0.ContainsKey(mk)
			r.check(err)
			e, has := w.m0[k][mk]
			if ok != has || c != has || got != e.v {
				r.fatalf("m0[%q].GetValue(%d) = %q, %v, contains %v; model %+v, %v", k, mk, got, ok, c, e, has)
			}
		default:
			r.readMap0(k)
		}
	case 6, 7: // map m1: string keys, TTL
		mk := fmt.Sprintf("k%d", r.rng.IntN(8))
		switch r.rng.IntN(5) {
		case 0, 1:
			v := float64(r.rng.IntN(100)) - 49.5
			r.check(r.vs.m1.UpdateValue(mk, v))
			if w.m1[k] == nil {
				w.m1[k] = map[string]mItem[float64]{}
			}
			w.m1[k][mk] = mItem[float64]{v, r.exp(ttlM1)}
		case 2:
			r.check(r.vs.m1.RemoveKey(mk))
			delete(w.m1[k], mk)
		case 3:
			got, ok, err := r.vs.m1.GetValue(mk)
			r.check(err)
			e, has := w.m1[k][mk]
			want := has && live(e.exp, r.now)
			if ok != want || (want && got != e.v) {
				r.fatalf("m1[%q].GetValue(%q) = %v, %v; model %+v, %v", k, mk, got, ok, e, has)
			}
		default:
			r.readMap1(k)
		}
	case 8: // timers of the current key
		e := r.now - 10 + r.rng.Int64N(200)
		switch r.rng.IntN(4) {
		case 0, 1:
			r.check(r.vs.tm.Register([]byte(k), e))
			if w.timers[k] == nil {
				w.timers[k] = map[int64]bool{}
			}
			w.timers[k][e] = true
		case 2:
			if ts := slices.Sorted(maps.Keys(w.timers[k])); len(ts) > 0 && r.rng.IntN(2) == 0 {
				e = ts[r.rng.IntN(len(ts))]
			}
			r.check(r.vs.tm.Delete([]byte(k), e))
			delete(w.timers[k], e)
		default:
			r.readTimers(k)
		}
	}
}

// checkPhysical verifies, after Finish at r.now, that nothing expired is
// left and that the TTL index matches the entries exactly.
func (r *modelRun) checkPhysical() {
	index := map[string]bool{}
	r.check(r.s.Scan(keys.KindPrefix(changelog.KindTTL), keys.PrefixEnd(keys.KindPrefix(changelog.KindTTL)), func(k, _ []byte) bool {
		index[string(k)] = true
		return true
	}))
	n := 0
	r.check(r.s.Scan(keys.KindPrefix(changelog.KindState), keys.PrefixEnd(keys.KindPrefix(changelog.KindState)), func(k, v []byte) bool {
		h, _, err := changelog.DecodeValue(v)
		r.check(err)
		if h.Expiry != changelog.NoExpiry {
			if h.Expiry <= r.now {
				r.fatalf("entry %x expired at %d still present after Finish", k, h.Expiry)
			}
			ik := string(changelogfmt.TTLKey(h.Expiry, k))
			if !index[ik] {
				r.fatalf("entry %x (expiry %d) has no TTL index entry", k, h.Expiry)
			}
			delete(index, ik)
		}
		n++
		return true
	}))
	if len(index) != 0 {
		r.fatalf("%d stale TTL index entries", len(index))
	}
}

func (r *modelRun) batch() {
	r.now += r.rng.Int64N(40)
	r.s.Begin(r.now)
	r.prefetch()
	if r.rng.IntN(4) == 0 {
		k := modelKeys[r.rng.IntN(len(modelKeys))]
		r.s.SetCurrentKey([]byte(k))
		r.readValue(1, k)
	}
	// Savepoints as the engine takes them per grouping key: some are
	// rolled back (the key failed under a dead-letter policy), sometimes
	// to an older savepoint than the last one.
	type savepoint struct {
		sp    shard.Savepoint
		model *model
	}
	var sps []savepoint
	pointOnly := r.rng.IntN(3) == 0
	for range r.rng.IntN(30) {
		switch r.rng.IntN(10) {
		case 0, 1:
			sp, err := r.s.Savepoint()
			r.check(err)
			sps = append(sps, savepoint{sp, r.work.clone()})
		case 2:
			if len(sps) > 0 {
				i := r.rng.IntN(len(sps))
				r.check(r.s.RollbackTo(sps[i].sp))
				r.work = sps[i].model.clone()
				sps = sps[:i+1] // later savepoints are invalid now
				r.savepoints++
			}
		}
		r.randomOp(pointOnly)
	}
	// Fire expired timers like the engine: handler may register more; each
	// fired timer is deleted afterwards.
	for _, tm := range r.readExpired() {
		r.s.SetCurrentKey(tm.Key)
		if r.rng.IntN(3) == 0 {
			r.check(r.vs.tm.Register(tm.Key, r.now+1+r.rng.Int64N(50)))
			if r.work.timers[string(tm.Key)] == nil {
				r.work.timers[string(tm.Key)] = map[int64]bool{}
			}
			// Registered just below; the model learns it from List.
			got, err := r.vs.tm.List(tm.Key)
			r.check(err)
			for _, e := range got {
				r.work.timers[string(tm.Key)][e] = true
			}
		}
		r.check(r.vs.tm.Delete(tm.Key, tm.Expiry))
		delete(r.work.timers[string(tm.Key)], tm.Expiry)
	}
	switch p := r.rng.IntN(100); {
	case p < 8: // Abort (e.g. the Kafka transaction failed)
		if r.rng.IntN(2) == 0 {
			_, err := r.s.Finish()
			r.check(err)
		}
		r.s.Abort()
		r.work = r.pending.clone()
	case p < 12: // crash in the middle of the batch
		r.restart(r.durable)
	case p < 17: // crash after the Kafka commit, before the local Commit
		recs, err := r.s.Finish()
		r.check(err)
		r.log.append(recs)
		r.work.expire(r.now)
		r.restart(r.work)
	default:
		recs, err := r.s.Finish()
		r.check(err)
		r.checkPhysical()
		r.log.append(recs)
		// The engine writes a full layer in the background for small
		// batches and within the commit for a backlog's: both, at random.
		r.s.SetBackgroundFlush(r.rng.IntN(2) == 0)
		r.check(r.s.Commit(r.log.next()))
		r.work.expire(r.now)
		r.durable = r.work.clone()
		r.pending = r.work.clone()
	}
}

func runModel(t *testing.T, seed uint64, batches int, fresh func(wb int64) (*shard.Shard, error), reopen func(wb int64) (*shard.Shard, error), closeOld func()) {
	r := &modelRun{
		t: t, rng: rand.New(rand.NewPCG(seed, seed^0x5eed)), now: 1000,
		durable: newModel(), pending: newModel(), work: newModel(),
		fresh: fresh, reopen: reopen, closeOld: closeOld, restarts: map[string]int{},
	}
	var err error
	r.s, err = fresh(r.writeBehind())
	r.check(err)
	defer func() { r.s.Close() }()
	r.declare(false)
	for range batches {
		r.batch()
	}
	r.verifyAll()
	st := r.s.Stats()
	t.Logf("seed %d: %d ops in %d batches, %d rollbacks to savepoints, %d changelog records, restarts %v; stats since last restart %+v",
		seed, r.ops, batches, r.savepoints, len(r.log.recs), r.restarts, st)
	if r.savepoints < batches/20 {
		t.Fatalf("only %d rollbacks to savepoints", r.savepoints)
	}
	if r.ops < batches {
		t.Fatalf("only %d ops", r.ops)
	}
	// Most reads hit the committed-state cache when there is one.
	if want := batches / 10; shard.PrefetchCapableForTest(r.s) && (r.served < want && !shard.CachedForTest(r.s) || r.served == 0) {
		t.Fatalf("only %d reads answered by prefetched values", r.served)
	}
}

func TestModelMemory(t *testing.T) {
	batches := 1500
	if testing.Short() {
		batches = 300
	}
	for _, seed := range []uint64{1, 2, 3} {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			// The "directory" of a memory shard is its store, kept open across
			// shard Close by noClose.
			var store kv.Store
			// It reads many keys at once as RocksDB does (multiGetter), so
			// that prefetched reads are checked on this store too.
			fresh := func(wb int64) (*shard.Shard, error) {
				store = kv.NewMemory()
				return shard.OpenShard(shard.ShardOptions{Backend: multiGetter{noClose{store}, t}, AllowTTL: true, WriteBehindBytes: wb})
			}
			reopen := func(wb int64) (*shard.Shard, error) {
				return shard.OpenShard(shard.ShardOptions{Backend: multiGetter{noClose{store}, t}, AllowTTL: true, WriteBehindBytes: wb})
			}
			runModel(t, seed, batches, fresh, reopen, func() {})
		})
	}
}

func TestModelRocksDB(t *testing.T) {
	if testing.Short() {
		t.Skip("RocksDB model run skipped in -short mode")
	}
	root := t.TempDir()
	n := 0
	var dir string
	fresh := func(wb int64) (*shard.Shard, error) {
		n++
		dir = filepath.Join(root, fmt.Sprint("shard", n))
		return shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true, WriteBehindBytes: wb})
	}
	reopen := func(wb int64) (*shard.Shard, error) {
		return shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true, WriteBehindBytes: wb})
	}
	runModel(t, 7, 400, fresh, reopen, func() {})
}

// TestModelPebble is TestModelRocksDB on the Pebble backend: the batch's
// reused iterator, list tails and timer cache on both stores.
func TestModelPebble(t *testing.T) {
	if testing.Short() {
		t.Skip("Pebble model run skipped in -short mode")
	}
	root := t.TempDir()
	n := 0
	var dir string
	open := func(wb int64) (*shard.Shard, error) {
		return shard.OpenShard(shard.ShardOptions{Dir: dir, AllowTTL: true, StoreBackend: kv.BackendPebble, WriteBehindBytes: wb})
	}
	fresh := func(wb int64) (*shard.Shard, error) {
		n++
		dir = filepath.Join(root, fmt.Sprint("shard", n))
		return open(wb)
	}
	runModel(t, 8, 400, fresh, open, func() {})
}
