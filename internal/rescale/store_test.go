package rescale

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/shard"
)

// buildBoth plans src with Build (in memory) and with a Store fed the
// entries in log order (hist: each partition's records, tombstones
// included, whose compaction view is src), and fails the test unless both
// refuse or both plan the same records in the same order.
func buildBoth(t *testing.T, src map[int32]map[string][]byte, hist map[int32][][2][]byte, n int, offsets []int64) (*Plan, error) {
	t.Helper()
	want, werr := Build(src, n, offsets)
	s, err := OpenStore(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if err := s.Close(); err != nil {
			t.Error(err)
		}
	}()
	for p := range src {
		s.AddPartition(p)
		if hist == nil {
			for k, v := range src[p] {
				if err := s.Put(p, []byte(k), v); err != nil {
					t.Fatal(err)
				}
			}
			continue
		}
		for _, r := range hist[p] {
			if err := s.Put(p, r[0], r[1]); err != nil {
				t.Fatal(err)
			}
		}
	}
	got, gerr := s.Build(n, offsets)
	if (werr == nil) != (gerr == nil) || errors.Is(werr, ErrRefused) != errors.Is(gerr, ErrRefused) {
		t.Fatalf("Build: %v\nStore.Build: %v", werr, gerr)
	}
	if werr != nil {
		return nil, werr
	}
	recs := make([][]Entry, len(got.Partitions))
	for i, pp := range got.Partitions {
		if err := s.Each(pp.Partition, func(e Entry) bool { recs[i] = append(recs[i], e); return true }); err != nil {
			t.Fatal(err)
		}
	}
	for i := range want.Partitions {
		w, g := want.Partitions[i].Records, recs[i]
		if len(w) != len(g) {
			t.Fatalf("partition %d: Store yields %d records, Build plans %d", i, len(g), len(w))
		}
		for j := range w {
			if !bytes.Equal(w[j].Key, g[j].Key) || !bytes.Equal(w[j].Value, g[j].Value) || g[j].Value == nil {
				t.Fatalf("partition %d record %d: Store yields %x=%x, Build plans %x=%x", i, j, g[j].Key, g[j].Value, w[j].Key, w[j].Value)
			}
		}
		want.Partitions[i].Records = nil
	}
	if !reflect.DeepEqual(want, got) {
		t.Fatalf("plans differ:\nBuild:       %+v\nStore.Build: %+v", want, got)
	}
	return got, nil
}

// TestStoreMatchesBuild: on random states (several variables with ids
// that differ between partitions, state, timer and TTL entries, merged
// metadata, pending skips, overwritten and deleted entries, sometimes a
// grouping key in two partitions, a dropped variable's data or bad
// metadata), the on-disk rescale plans exactly what Build plans, or
// refuses as Build does.
func TestStoreMatchesBuild(t *testing.T) {
	names := []string{"count", "seen", "last", "hist"}
	kinds := []string{"value", "map", "list", "value"}
	plans, refusals := 0, 0
	for seed := range uint64(150) {
		r := rand.New(rand.NewPCG(seed, 7))
		m := 1 + r.IntN(3)
		n := m + 1 + r.IntN(4)
		src := map[int32]map[string][]byte{}
		hist := map[int32][][2][]byte{}
		put := func(p int32, k []byte, v []byte) {
			hist[p] = append(hist[p], [2][]byte{k, v})
			if v == nil {
				delete(src[p], string(k))
			} else {
				src[p][string(k)] = v
			}
		}
		for p := range int32(m) {
			src[p] = map[string][]byte{}
			// Registries: a subset of the variables, ids shuffled.
			ids := r.Perm(len(names) + 1)
			var declared []uint32
			for i, name := range names {
				if r.IntN(4) == 0 {
					continue
				}
				id := uint32(ids[i] + 1)
				schemas := `["int64"]`
				if r.IntN(3) == 0 {
					schemas = `["int64","string"]`
				}
				put(p, changelogfmt.MetaKey("var/"+name), fmt.Appendf(nil, `{"id":%d,"kind":%q,"schema":"int64","schemas":%s,"schemaId":1}`, id, kinds[i], schemas))
				declared = append(declared, id)
			}
			put(p, changelogfmt.MetaKey("varid/next"), u32(uint32(1+r.IntN(7))))
			put(p, changelogfmt.MetaKey(engine.MetaTimeMode), []byte("ProcessingTime"))
			if r.IntN(20) == 0 {
				put(p, changelogfmt.MetaKey(engine.MetaTimeMode), []byte("EventTime")) // may differ: refused
			}
			put(p, changelogfmt.MetaKey(engine.MetaInputOffset), i64(int64(r.IntN(1000))))
			put(p, changelogfmt.MetaKey(engine.MetaBatchID), i64(int64(r.IntN(50))))
			if r.IntN(2) == 0 {
				put(p, changelogfmt.MetaKey(engine.MetaWatermark), i64(int64(r.IntN(9000))))
			}
			put(p, changelogfmt.MetaKey(shard.VarSetMeta), u32(uint32(r.IntN(5))))
			if r.IntN(3) == 0 {
				k, v := engine.SkipRecord("in", int64(r.IntN(300)-100))
				put(p, k, v)
			}
			if r.IntN(5) == 0 {
				put(p, changelogfmt.MetaKey(engine.MetaInitialApplied), []byte{1})
			}
			// Entries of the keys A's partitioning put here.
			for i := range 40 + r.IntN(80) {
				g := fmt.Appendf(nil, "k%d", r.IntN(200))
				if murmur2.Partition(g, m) != p && (r.IntN(400) != 0 || m == 1) {
					continue // another partition's key (rarely kept: refused)
				}
				id := uint32(1 + r.IntN(5))
				if len(declared) > 0 && r.IntN(30) != 0 {
					id = declared[r.IntN(len(declared))]
				}
				sk := changelogfmt.StateKey(id, g, fmt.Appendf(nil, "%d", r.IntN(3)))
				switch r.IntN(6) {
				case 0:
					put(p, changelogfmt.TimerKey(int64(r.IntN(1e6)), g), []byte{})
				case 1:
					put(p, changelogfmt.TimerByKey(g, int64(r.IntN(1e6))), []byte{})
				case 2:
					put(p, changelogfmt.TTLKey(int64(r.IntN(1e6)), sk), []byte{})
				default:
					put(p, sk, val(fmt.Sprint(i)))
				}
				if r.IntN(8) == 0 {
					put(p, sk, nil) // a tombstone
				}
			}
		}
		offsets := make([]int64, n)
		for p := range offsets {
			offsets[p] = int64(r.IntN(500))
		}
		t.Run(fmt.Sprint(seed), func(t *testing.T) {
			if _, err := buildBoth(t, src, hist, n, offsets); err != nil {
				refusals++
			} else {
				plans++
			}
		})
	}
	// Both outcomes must be exercised for the comparison to mean anything.
	if plans < 60 || refusals < 15 {
		t.Fatalf("%d plans, %d refusals: the generator no longer covers both", plans, refusals)
	}
	t.Logf("%d plans, %d refusals", plans, refusals)
}

// TestStoreMatchesBuildFixtures compares the two on the fixtures of the
// Build tests.
func TestStoreMatchesBuildFixtures(t *testing.T) {
	plan, err := buildBoth(t, twoPartitions(), nil, 4, []int64{10, 11, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if plan.Partitions[0].Records != nil || plan.Partitions[0].RecordCount == 0 {
		t.Fatalf("Store.Build holds records in memory: %+v", plan.Partitions[0])
	}
	src := twoPartitions()
	src[1][string(changelogfmt.StateKey(1, []byte("a"), []byte("x")))] = val("a") // "a" is in partition 0 too
	if murmur2.Partition([]byte("a"), 2) != 0 {
		t.Fatal("fixture: a is not in partition 0")
	}
	if _, err := buildBoth(t, src, nil, 4, []int64{0, 0, 0, 0}); err == nil {
		t.Fatal("a grouping key in two partitions was not refused")
	}
}

// TestStoreCloseRemovesDir: the spilled state does not outlive the
// rescale.
func TestStoreCloseRemovesDir(t *testing.T) {
	dir := t.TempDir()
	s, err := OpenStore(dir)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 1000 {
		if err := s.Put(0, changelogfmt.StateKey(1, fmt.Appendf(nil, "k%d", i), nil), val("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Build(2, []int64{0, 0}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "*"))
	if len(left) > 0 {
		t.Fatalf("left behind: %v", left)
	}
	_ = os.Remove(dir)
}
