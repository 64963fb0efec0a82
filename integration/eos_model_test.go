package integration

import (
	"context"
	"encoding/binary"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/integration/testapp/eos"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/restore"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/internal/timers"
)

// The model of the eos application (integration/testapp/eos): the input
// the test produced, and from it the exact output topic and state.

// eosRow is one produced input record.
type eosRow struct {
	key     string
	seq, ev int64 // 0 for a poison record
	part    int32
	input   int    // 0: the input topic, 1: the second (withSecondInput)
	offset  int64  // in the input partition
	value   string // as produced
	bad     string // "" for a good row, else the dead-letter stage: engine.StageDecode (poison) or StageProcess (fail row)
}

// eosInput generates and produces the input, keeping every row in
// produce order.
type eosInput struct {
	brokers []string
	topic   string
	parts   int
	keys    []string
	seq     map[string]int64
	ev      int64
	rows    []eosRow
	next    []int64 // next offset per input partition
	prod    *kafka.Producer

	// topic2 (withSecondInput) is a second input topic: the keys of odd
	// index write to it (every row of a key to one topic, so a key's rows
	// keep their order), as JSON (eos.Row2). next2 is its next offsets.
	topic2 string
	next2  []int64

	// Bad rows (withBadRows): a poison value on a random key of keys, a
	// fail row on a random key of failKeys (keys that get nothing else).
	poisonRate, failRate float64
	failKeys             []string
	poisons              int64
}

func newEOSInput(t *testing.T, e specEnv, parts, keys int) *eosInput {
	t.Helper()
	p, err := kafka.NewProducer(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	in := &eosInput{brokers: e.brokers, topic: e.in, parts: parts, seq: map[string]int64{}, ev: 1_000_000, next: make([]int64, parts), prod: p}
	for i := range keys {
		in.keys = append(in.keys, fmt.Sprintf("k%02d", i))
	}
	return in
}

// withBadRows makes produce draw poison values (rate poison) and fail rows
// (rate fail) among the rows, for an application run with -dead-letter;
// the fail rows go to keys of their own, two per partition (two failing
// calls in one batch of a partition).
func (in *eosInput) withBadRows(poison, fail float64) *eosInput {
	in.poisonRate, in.failRate = poison, fail
	per := map[int32]int{}
	for i := 0; len(in.failKeys) < 2*in.parts; i++ {
		k := fmt.Sprintf("f%02d", i)
		if p := engine.PartitionFor([]byte(k), in.parts); per[p] < 2 {
			per[p]++
			in.failKeys = append(in.failKeys, k)
		}
	}
	return in
}

// withSecondInput makes half the keys write to topic (same partition
// count), for an application run with -in2.
func (in *eosInput) withSecondInput(topic string) *eosInput {
	in.topic2, in.next2 = topic, make([]int64, in.parts)
	return in
}

// inputOf returns the input (0 or 1) key k writes to.
func (in *eosInput) inputOf(k string) int {
	if in.topic2 == "" {
		return 0
	}
	for i, x := range in.keys {
		if x == k {
			return i % 2
		}
	}
	return 0
}

// eosSpec is a row to produce: its key and kind ("" good, or the stage
// that dead-letters it).
type eosSpec struct{ key, bad string }

// produce writes n new rows for random keys (one produce call: rows of a
// partition keep their order, so event time increases in every partition).
func (in *eosInput) produce(t *testing.T, rng *rand.Rand, n int) {
	t.Helper()
	if err := in.produceErr(rng, n); err != nil {
		t.Fatal(err)
	}
}

// produceEveryPartition writes one row to every partition, jumping the
// event time by jump first.
func (in *eosInput) produceEveryPartition(t *testing.T, rng *rand.Rand, jump int64) {
	t.Helper()
	in.ev += jump
	var keys []eosSpec
	for p := range int32(in.parts) {
		var of []string
		for _, k := range in.keys {
			if engine.PartitionFor([]byte(k), in.parts) == p {
				of = append(of, k)
			}
		}
		keys = append(keys, eosSpec{key: of[rng.IntN(len(of))]})
	}
	if err := in.produceKeys(keys); err != nil {
		t.Fatal(err)
	}
}

// produceErr is produce for goroutines other than the test's.
func (in *eosInput) produceErr(rng *rand.Rand, n int) error {
	keys := make([]eosSpec, n)
	for i := range keys {
		if in.poisonRate+in.failRate > 0 { // no extra draws otherwise: the other tests' seeds keep their meaning
			switch x := rng.Float64(); {
			case x < in.poisonRate:
				keys[i] = eosSpec{in.keys[rng.IntN(len(in.keys))], engine.StageDecode}
				continue
			case x < in.poisonRate+in.failRate:
				keys[i] = eosSpec{in.failKeys[rng.IntN(len(in.failKeys))], engine.StageProcess}
				continue
			}
		}
		keys[i] = eosSpec{key: in.keys[rng.IntN(len(in.keys))]}
	}
	return in.produceKeys(keys)
}

func (in *eosInput) produceKeys(keys []eosSpec) error {
	recs := make([]kafka.Record, len(keys))
	for i, sp := range keys {
		k := sp.key
		r := eosRow{key: k, part: engine.PartitionFor([]byte(k), in.parts), bad: sp.bad, input: in.inputOf(k)}
		next, topic := in.next, in.topic
		if r.input == 1 {
			next, topic = in.next2, in.topic2
		}
		r.offset = next[r.part]
		next[r.part]++
		if sp.bad == engine.StageDecode {
			in.poisons++
			r.value = eos.PoisonValue(in.poisons)
		} else {
			in.seq[k]++
			in.ev++
			r.seq, r.ev = in.seq[k], in.ev
			r.value = eos.Row(r.seq, r.ev)
			if sp.bad == engine.StageProcess {
				r.value = eos.FailRow(r.seq, r.ev)
			}
		}
		in.rows = append(in.rows, r)
		value := r.value
		if r.input == 1 {
			value = eos.Row2(value)
		}
		recs[i] = kafka.Record{Topic: topic, Partition: r.part, Key: []byte(k), Value: []byte(value)}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := in.prod.Produce(ctx, recs...); err != nil {
		return fmt.Errorf("produce input: %w", err)
	}
	return nil
}

// eosKeyState is the model of one key's state.
type eosKeyState struct {
	part    int32
	count   int64
	last    []int64
	buckets map[string]int64
	fired   int64
	pending []int64 // timers not fired
}

type eosPartState struct {
	rows  int64 // = the input partition's end offset (non-transactional producer)
	rows2 int64 // the same of the second input topic (withSecondInput)
	maxEv int64 // = the final watermark + the allowed lateness (0, or eos.Lateness2 with two inputs)
	keys  []string
}

// eosModel is the exact expected result of processing every produced row.
type eosModel struct {
	outputs map[string][]string // output key → values in order
	total   int
	keys    map[string]*eosKeyState
	parts   []eosPartState
	// deadLetters are the bad rows, each to be dead-lettered exactly once.
	deadLetters []eosRow
	// lateness is the application's allowed lateness in ms (eos.Lateness2
	// with two inputs): the watermark is the max event time minus it.
	lateness int64
	topic2   string // the second input topic; "": none
}

func (in *eosInput) model() *eosModel {
	m := &eosModel{outputs: map[string][]string{}, keys: map[string]*eosKeyState{}, parts: make([]eosPartState, in.parts)}
	if in.topic2 != "" {
		m.lateness, m.topic2 = eos.Lateness2.Milliseconds(), in.topic2
	}
	count := func(r eosRow) {
		if r.input == 1 {
			m.parts[r.part].rows2++
		} else {
			m.parts[r.part].rows++
		}
	}
	timersOf := map[string][]int64{}
	for _, r := range in.rows {
		if r.bad != "" {
			// A bad row moves the input offset; a fail row (decoded, with
			// an event time) the watermark too. Nothing else: a failing
			// call's changes are discarded, and fail keys get only fail
			// rows.
			m.deadLetters = append(m.deadLetters, r)
			p := &m.parts[r.part]
			count(r)
			if r.bad == engine.StageProcess {
				p.maxEv = max(p.maxEv, r.ev)
			}
			continue
		}
		ks := m.keys[r.key]
		if ks == nil {
			ks = &eosKeyState{part: r.part, buckets: map[string]int64{}}
			m.keys[r.key] = ks
			m.parts[r.part].keys = append(m.parts[r.part].keys, r.key)
		}
		ks.count++
		ks.last = append(ks.last, r.seq)
		if len(ks.last) > eos.ListLen {
			ks.last = ks.last[len(ks.last)-eos.ListLen:]
		}
		b := eos.Bucket(r.seq)
		ks.buckets[b]++
		if r.seq%eos.TimerEvery == 0 {
			timersOf[r.key] = append(timersOf[r.key], r.ev+eos.TimerDelay)
		}
		m.outputs[r.key] = append(m.outputs[r.key], eos.Output(r.seq, ks.count, ks.last, ks.buckets[b]))
		p := &m.parts[r.part]
		count(r)
		p.maxEv = max(p.maxEv, r.ev)
	}
	for k, ks := range m.keys {
		wm := m.parts[ks.part].maxEv - m.lateness
		for _, e := range timersOf[k] { // ascending: ev grows with seq
			if e <= wm {
				ks.fired++
				m.outputs[k+eos.TimerKeySuffix] = append(m.outputs[k+eos.TimerKeySuffix], eos.TimerOutput(e, ks.fired))
			} else {
				ks.pending = append(ks.pending, e)
			}
		}
	}
	for _, vs := range m.outputs {
		m.total += len(vs)
	}
	for i := range m.parts {
		slices.Sort(m.parts[i].keys)
	}
	return m
}

// checkOutputs requires got (the read_committed output topic) to be
// exactly the model's outputs: per output key, the same rows in the same
// order — no loss, no duplicate, no reordering.
func (m *eosModel) checkOutputs(t *testing.T, got testprocs.Outputs, seed uint64) {
	t.Helper()
	var bad []string
	for _, k := range slices.Sorted(maps.Keys(unionKeys(m.outputs, got))) {
		w, g := m.outputs[k], got[k]
		if slices.Equal(w, g) {
			continue
		}
		i := 0
		for i < len(w) && i < len(g) && w[i] == g[i] {
			i++
		}
		dups := 0
		seen := map[string]bool{}
		for _, v := range g {
			if seen[v] {
				dups++
			}
			seen[v] = true
		}
		d := fmt.Sprintf("key %s: %d rows, want %d; %d duplicates; first difference at row %d:", k, len(g), len(w), dups, i)
		if i < len(g) {
			d += fmt.Sprintf(" got %q", g[i])
		}
		if i < len(w) {
			d += fmt.Sprintf(" want %q", w[i])
		}
		bad = append(bad, d)
	}
	if len(bad) > 0 {
		if len(bad) > 10 {
			bad = append(bad[:10], fmt.Sprintf("... and %d more keys", len(bad)-10))
		}
		t.Fatalf("seed %d: output topic differs from the exact expected output (%d rows, want %d):\n%s",
			seed, got.Count(), m.total, strings.Join(bad, "\n"))
	}
}

func unionKeys(a map[string][]string, b testprocs.Outputs) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}

// waitEOSOutputs waits until the output topic holds at least the model's
// number of rows (read_committed) and returns it; children that fail
// meanwhile fail the test, and so does a timeout, with the difference.
func waitEOSOutputs(t *testing.T, e specEnv, m *eosModel, seed uint64, d time.Duration, children ...*eosChild) testprocs.Outputs {
	t.Helper()
	deadline := time.Now().Add(d)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		got, err := testprocs.Read(ctx, e.brokers, e.out)
		cancel()
		if err == nil && got.Count() >= m.total {
			return got
		}
		for _, c := range children {
			c.failIfErrored(t)
		}
		if time.Now().After(deadline) {
			for _, c := range children {
				c.dump(t)
			}
			t.Logf("waited %v for %d output rows (read error %v)", d, m.total, err)
			m.checkOutputs(t, got, seed)
			t.Fatalf("waited %v for %d output rows", d, m.total)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// checkChangelogState restores every partition's changelog (read_committed,
// from the start) into a fresh in-memory shard, reads it with the
// processor's typed state variables and requires it to equal the model:
// per key count, list, map, fired-timer count and pending timers; per
// partition the watermark and the input offset; and no other keys. It
// returns each partition's restored shard contents.
func (m *eosModel) checkChangelogState(t *testing.T, e specEnv, seed uint64) map[int32]map[string]string {
	t.Helper()
	dumps := map[int32]map[string]string{}
	for p := range int32(len(m.parts)) {
		sh, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory()})
		if err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		rd, err := kafka.NewPartitionReader(ctx, e.brokers, e.app+"-changelog", p, 0)
		if err != nil {
			cancel()
			t.Fatal(err)
		}
		st, err := restore.Restore(ctx, readerSource{rd}, sh, restore.Options{})
		rd.Close()
		cancel()
		if err != nil {
			t.Fatalf("restore changelog partition %d: %v", p, err)
		}
		dumps[p] = dumpShard(t, sh)
		errs := m.checkShard(sh, p, dumps[p])
		sh.Close()
		if len(errs) > 0 {
			if len(errs) > 10 {
				errs = append(errs[:10], fmt.Sprintf("... and %d more", len(errs)-10))
			}
			t.Fatalf("seed %d: state restored from changelog partition %d (%d records) differs from the model:\n%s",
				seed, p, st.Records, strings.Join(errs, "\n"))
		}
	}
	return dumps
}

func (m *eosModel) checkShard(sh *shard.Shard, p int32, dump map[string]string) []string {
	var errs []string
	bad := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	pm := m.parts[p]
	if wm, ok := metaInt(sh, engine.MetaWatermark); !ok || wm != pm.maxEv-m.lateness {
		bad("watermark %d (present %v), want %d", wm, ok, pm.maxEv-m.lateness)
	}
	if off, ok := metaInt(sh, engine.MetaInputOffset); ok != (pm.rows > 0) || off != pm.rows {
		bad("input offset %d (present %v), want %d", off, ok, pm.rows)
	}
	if m.topic2 != "" {
		if off, ok := metaInt(sh, engine.InputOffsetMeta(1, m.topic2)); ok != (pm.rows2 > 0) || off != pm.rows2 {
			bad("input offset of %s %d (present %v), want %d", m.topic2, off, ok, pm.rows2)
		}
	}
	// Every grouping key that has state or timers must be a key of the model.
	present := map[string]bool{}
	for k := range dump {
		dk, err := changelog.DecodeKey([]byte(k))
		if err != nil {
			bad("undecodable shard key %x: %v", k, err)
			continue
		}
		if dk.Kind == changelog.KindState || dk.Kind == changelog.KindTimer || dk.Kind == changelog.KindTimerKey {
			present[string(dk.GroupKey)] = true
		}
	}
	if want := pm.keys; !slices.Equal(slices.Sorted(maps.Keys(present)), want) {
		bad("grouping keys with state %v, want %v", slices.Sorted(maps.Keys(present)), want)
	}

	sh.SetDeclaring(true)
	v, err := eos.Declare(sh)
	sh.SetDeclaring(false)
	if err != nil {
		return append(errs, fmt.Sprintf("declare: %v", err))
	}
	tm := timers.New(sh)
	sh.Begin(-1)
	defer sh.Abort()
	for _, k := range pm.keys {
		ks := m.keys[k]
		sh.SetCurrentKey([]byte(k))
		if n, _, err := v.Count.Get(); err != nil || n != ks.count {
			bad("key %s: count %d (%v), want %d", k, n, err, ks.count)
		}
		var last []int64
		if it, err := v.Last.Get(); err != nil {
			bad("key %s: list: %v", k, err)
		} else {
			last = slices.Collect(it)
		}
		if !slices.Equal(last, ks.last) {
			bad("key %s: last %v, want %v", k, last, ks.last)
		}
		bs := map[string]int64{}
		if it, err := v.Buckets.Iterator(); err != nil {
			bad("key %s: map: %v", k, err)
		} else {
			maps.Insert(bs, it)
		}
		if !maps.Equal(bs, ks.buckets) {
			bad("key %s: buckets %v, want %v", k, bs, ks.buckets)
		}
		f, ok, err := v.Fired.Get()
		if err != nil || f != ks.fired || ok != (ks.fired > 0) {
			bad("key %s: fired %d (present %v, %v), want %d", k, f, ok, err, ks.fired)
		}
		pending, err := tm.List([]byte(k))
		if err != nil || !slices.Equal(pending, ks.pending) {
			bad("key %s: pending timers %v (%v), want %v", k, pending, err, ks.pending)
		}
	}
	return errs
}

func metaInt(sh *shard.Shard, name string) (int64, bool) {
	b, ok, err := sh.GetMeta(name)
	if err != nil || !ok || len(b) != 8 {
		return 0, false
	}
	return int64(binary.BigEndian.Uint64(b)), true
}

// checkLocalShards requires, for every partition, that the most advanced
// local shard among the instances' state directories (the last owner's)
// holds exactly what the changelog holds: local state equals Kafka's, not
// ahead, not behind. Every instance must have stopped.
func checkLocalShards(t *testing.T, app string, parts int, dirs []string, changelogDumps map[int32]map[string]string) {
	t.Helper()
	for p := range int32(parts) {
		type local struct {
			dir    string
			offset int64
			dump   map[string]string
		}
		var best []local
		for _, d := range dirs {
			path := filepath.Join(d, app, strconv.Itoa(int(p)))
			if _, err := os.Stat(path); err != nil {
				continue
			}
			sh, err := shard.OpenShard(shard.ShardOptions{Dir: path})
			if err != nil {
				t.Fatalf("open local shard %s: %v", path, err)
			}
			l := local{dir: path, offset: sh.ChangelogOffset(), dump: dumpShard(t, sh)}
			sh.Close()
			switch {
			case len(best) == 0 || l.offset > best[0].offset:
				best = []local{l}
			case l.offset == best[0].offset:
				best = append(best, l)
			}
		}
		if len(best) == 0 {
			t.Fatalf("partition %d: no local shard in %v", p, dirs)
		}
		want := changelogDumps[p]
		for _, l := range best {
			if maps.Equal(l.dump, want) {
				continue
			}
			var diff []string
			for k := range unionStrings(l.dump, want) {
				if lv, ok := l.dump[k]; !ok || lv != want[k] {
					dk, _ := changelog.DecodeKey([]byte(k))
					_, inCL := want[k]
					diff = append(diff, fmt.Sprintf("%v key %q: local %x (present %v), changelog %x (present %v)", dk.Kind, dk.GroupKey, lv, ok, want[k], inCL))
				}
			}
			slices.Sort(diff)
			if len(diff) > 10 {
				diff = append(diff[:10], fmt.Sprintf("... %d more", len(diff)-10))
			}
			t.Fatalf("partition %d: local shard %s (changelog offset %d) differs from the changelog:\n%s", p, l.dir, l.offset, strings.Join(diff, "\n"))
		}
	}
}

func unionStrings(a, b map[string]string) map[string]bool {
	u := map[string]bool{}
	for k := range a {
		u[k] = true
	}
	for k := range b {
		u[k] = true
	}
	return u
}
