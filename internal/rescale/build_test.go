package rescale

import (
	"encoding/binary"
	"errors"
	"strings"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/internal/shard"
)

func i64(v int64) []byte  { return binary.BigEndian.AppendUint64(nil, uint64(v)) }
func u32(v uint32) []byte { return binary.BigEndian.AppendUint32(nil, v) }
func meta(name string) string {
	return string(changelogfmt.MetaKey(name))
}

func val(s string) []byte {
	return changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, []byte(s))
}

const regCount = `{"id":1,"kind":"value","schema":"int64","schemas":["int64"],"schemaId":1}`

func twoPartitions() map[int32]map[string][]byte {
	src := map[int32]map[string][]byte{0: {}, 1: {}}
	for p := range int32(2) {
		m := src[p]
		m[meta("var/count")] = []byte(regCount)
		m[meta("varid/next")] = u32(2)
		m[meta(engine.MetaTimeMode)] = []byte("ProcessingTime")
		m[meta(engine.MetaInputOffset)] = i64(100 + int64(p))
	}
	src[0][meta(changelog.LayoutMeta)] = []byte("2") // partition 1: no batch since the entry came
	src[0][meta(engine.MetaBatchID)] = i64(7)
	src[1][meta(engine.MetaBatchID)] = i64(9)
	src[0][meta(engine.MetaWatermark)] = i64(5000)
	src[1][meta(engine.MetaWatermark)] = i64(4000)
	src[1][meta(engine.MetaInitialApplied)] = []byte{1}
	// Versions of the set of variables differ (a partition added later
	// counted fewer): the largest is kept, not refused.
	src[0][meta(shard.VarSetMeta)] = u32(3)
	src[1][meta(shard.VarSetMeta)] = u32(2)
	// Keys where the old partitioning (2) put them.
	for _, k := range []string{"a", "b", "c", "d", "e", "f", "g", "h"} {
		p := murmur2.Partition([]byte(k), 2)
		sk := changelogfmt.StateKey(1, []byte(k), nil)
		src[p][string(sk)] = val(k)
		src[p][string(changelogfmt.TimerKey(42, []byte(k)))] = []byte{}
		src[p][string(changelogfmt.TimerByKey([]byte(k), 42))] = []byte{}
		src[p][string(changelogfmt.TTLKey(99, sk))] = []byte{}
	}
	return src
}

func TestBuildRoutesAndMerges(t *testing.T) {
	plan, err := Build(twoPartitions(), 4, []int64{10, 11, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if *plan.BatchID != 9 || *plan.Watermark != 4000 || !plan.InitialStateApplied || plan.NextVarID != 2 || plan.LateWatermark != nil {
		t.Fatalf("merged meta: batch %v wm %v initial %v next %d", *plan.BatchID, *plan.Watermark, plan.InitialStateApplied, plan.NextVarID)
	}
	keys := 0
	for _, pp := range plan.Partitions {
		got := map[string]string{}
		for _, e := range pp.Records {
			k, err := changelog.DecodeKey(e.Key)
			if err != nil {
				t.Fatal(err)
			}
			var g []byte
			switch k.Kind {
			case changelog.KindMeta:
				got[k.Name] = string(e.Value)
				continue
			case changelog.KindTTL:
				sk, _ := changelog.DecodeKey(k.StateKey)
				g = sk.GroupKey
			case changelog.KindTimerKey:
				t.Errorf("partition %d: an entry of the local timer index, %q: want it dropped", pp.Partition, k.GroupKey)
			default:
				g = k.GroupKey
			}
			if want := murmur2.Partition(g, 4); want != pp.Partition {
				t.Errorf("%v entry of %q in partition %d, want %d", k.Kind, g, pp.Partition, want)
			}
		}
		if got[engine.MetaInputOffset] != string(i64([]int64{10, 11, 0, 0}[pp.Partition])) {
			t.Errorf("partition %d: input offset %x", pp.Partition, got[engine.MetaInputOffset])
		}
		if got["var/count"] != regCount || got[engine.MetaTimeMode] != "ProcessingTime" || got[engine.MetaBatchID] != string(i64(9)) ||
			got[engine.MetaWatermark] != string(i64(4000)) || got[engine.MetaInitialApplied] != "\x01" || got["varid/next"] != string(u32(2)) ||
			got[shard.VarSetMeta] != string(u32(3)) || got[changelog.LayoutMeta] != "2" {
			t.Errorf("partition %d: meta %q", pp.Partition, got)
		}
		// B is written in this build's layout: its entry comes first.
		if k := string(pp.Records[0].Key); k != meta(changelog.LayoutMeta) {
			t.Errorf("partition %d: first record %q, want the layout entry", pp.Partition, k)
		}
		// A state entry, a timer and a TTL entry per key; the timer's entry
		// of the per-key index is dropped (a restore derives it).
		if pp.Entries != 3*pp.Keys {
			t.Errorf("partition %d: %d entries for %d keys, want 3 each", pp.Partition, pp.Entries, pp.Keys)
		}
		keys += pp.Keys
	}
	if keys != 8 {
		t.Errorf("%d keys, want 8", keys)
	}
}

func TestBuildRefuses(t *testing.T) {
	for _, tc := range []struct {
		name   string
		change func(src map[int32]map[string][]byte)
		want   string
	}{
		{"history differs", func(src map[int32]map[string][]byte) {
			src[1][meta("var/count")] = []byte(`{"id":1,"kind":"value","schema":"int32","schemas":["int32"],"schemaId":1}`)
		}, `schema history`},
		{"dropped variable's data under a taken id", func(src map[int32]map[string][]byte) {
			delete(src[1], meta("var/count"))
		}, `partition 1 holds data of variable id 1, which it does not declare, and variable "count" has that id`},
		{"modes differ", func(src map[int32]map[string][]byte) {
			src[1][meta(engine.MetaTimeMode)] = []byte("EventTime")
		}, `metadata "engine/time_mode"`},
		{"newer changelog layout", func(src map[int32]map[string][]byte) {
			src[1][meta(changelog.LayoutMeta)] = []byte("3")
		}, `partition 1 records changelog layout "3", and this build reads layouts up to 2`},
		{"key's list in another partition", func(src map[int32]map[string][]byte) {
			p := murmur2.Partition([]byte("a"), 2)
			src[1-p][string(changelogfmt.StateKey(1, []byte("a"), []byte{0, 0, 0, 0, 0, 0, 0, 1}))] = val("x")
		}, `grouping key "a" has state in partitions 0 and 1`},
		{"key in two partitions", func(src map[int32]map[string][]byte) {
			for _, k := range []string{"a", "b"} {
				p := murmur2.Partition([]byte(k), 2)
				src[1-p][string(changelogfmt.StateKey(1, []byte(k), nil))] = val("dup")
			}
		}, `has state in partitions`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			src := twoPartitions()
			tc.change(src)
			_, err := Build(src, 4, []int64{0, 0, 0, 0})
			if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err %v, want ErrRefused with %q", err, tc.want)
			}
		})
	}
	if _, err := Build(twoPartitions(), 2, []int64{0, 0}); !errors.Is(err, ErrRefused) {
		t.Errorf("same partition count: %v", err)
	}
}

// A partition that ran no batch since a schema change has the shorter
// history: the longer one is kept everywhere.
func TestBuildKeepsLongestHistory(t *testing.T) {
	src := twoPartitions()
	long := `{"id":1,"kind":"value","schema":"int64b","schemas":["int64","int64b"],"schemaId":2}`
	src[1][meta("var/count")] = []byte(long)
	plan, err := Build(src, 3, []int64{0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	for _, pp := range plan.Partitions {
		for _, e := range pp.Records {
			if string(e.Key) == meta("var/count") && string(e.Value) != long {
				t.Errorf("partition %d: registry %s", pp.Partition, e.Value)
			}
		}
	}
	if len(plan.Variables) != 1 || plan.Variables[0].SchemaID != 2 {
		t.Errorf("variables %+v", plan.Variables)
	}
}

// Ids allocated differently per partition are unified: state and TTL keys
// rewritten, registry entries carrying the new id, values untouched.
func TestBuildRemapsIDs(t *testing.T) {
	src := twoPartitions()
	// Partition 1 declared "other" first: other=1, count=2.
	src[1][meta("var/count")] = []byte(`{"id":2,"kind":"value","schema":"int64","schemas":["int64"],"schemaId":1}`)
	src[1][meta("var/other")] = []byte(`{"id":1,"kind":"list","schema":"string","schemas":["string"],"schemaId":1}`)
	src[1][meta("varid/next")] = u32(3)
	want := map[string]uint32{} // "<var>/<key>" → value written, checked below
	orig := map[string][]byte{}
	for k, v := range src[1] {
		orig[k] = v
	}
	for k, v := range orig {
		key, _ := changelog.DecodeKey([]byte(k))
		switch key.Kind {
		case changelog.KindState:
			// Partition 1's id-1 entries become "other" data, its id-2
			// entries "count" data.
			delete(src[1], k)
			src[1][string(changelogfmt.StateKey(2, key.GroupKey, nil))] = v
			src[1][string(changelogfmt.StateKey(1, key.GroupKey, []byte("\x00\x00\x00\x00\x00\x00\x00\x00")))] = val("o-" + string(key.GroupKey))
			want["count/"+string(key.GroupKey)] = 1
			want["other/"+string(key.GroupKey)] = 3
		case changelog.KindTTL:
			sk, _ := changelog.DecodeKey(key.StateKey)
			delete(src[1], k)
			src[1][string(changelogfmt.TTLKey(key.Expiry, changelogfmt.StateKey(2, sk.GroupKey, nil)))] = v
		}
	}
	for k := range src[0] {
		if key, _ := changelog.DecodeKey([]byte(k)); key.Kind == changelog.KindState {
			want["count/"+string(key.GroupKey)] = 1
		}
	}
	plan, err := Build(src, 3, []int64{0, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	if plan.NextVarID != 4 || len(plan.Remapped) != 2 {
		t.Fatalf("next id %d, remapped %q", plan.NextVarID, plan.Remapped)
	}
	got := map[string]uint32{}
	for _, pp := range plan.Partitions {
		for _, e := range pp.Records {
			key, _ := changelog.DecodeKey(e.Key)
			switch key.Kind {
			case changelog.KindState:
				_, payload, _ := changelog.DecodeValue(e.Value)
				name := "count"
				if strings.HasPrefix(string(payload), "o-") {
					name = "other"
				}
				if key.VarID != map[string]uint32{"count": 1, "other": 3}[name] {
					t.Errorf("%s entry of %q has id %d", name, key.GroupKey, key.VarID)
				}
				got[name+"/"+string(key.GroupKey)] = key.VarID
			case changelog.KindTTL:
				if sk, _ := changelog.DecodeKey(key.StateKey); sk.VarID != 1 {
					t.Errorf("TTL entry of %q points at id %d, want 1", sk.GroupKey, sk.VarID)
				}
			case changelog.KindMeta:
				switch key.Name {
				case "var/count":
					if !strings.Contains(string(e.Value), `"id":1`) {
						t.Errorf("registry of count: %s", e.Value)
					}
				case "var/other":
					if !strings.Contains(string(e.Value), `"id":3`) || !strings.Contains(string(e.Value), `"kind":"list"`) {
						t.Errorf("registry of other: %s", e.Value)
					}
				}
			}
		}
	}
	if len(got) != len(want) {
		t.Errorf("%d state entries, want %d: %v", len(got), len(want), got)
	}
}

// A pending skip (kstate.SkipRecord) of A's partition 1 stays with B's
// partition 1, which continues that input partition; a consumed one (-1)
// in partition 0 is dropped, and neither refuses the rescale as metadata
// that differs between partitions.
func TestBuildKeepsPendingSkip(t *testing.T) {
	src := twoPartitions()
	k0, v0 := engine.SkipRecord("in", -1)
	src[0][string(k0)] = v0
	k1, v1 := engine.SkipRecord("in", 175)
	src[1][string(k1)] = v1
	plan, err := Build(src, 4, []int64{10, 11, 0, 0})
	if err != nil {
		t.Fatal(err)
	}
	for p, pp := range plan.Partitions {
		var got []int64
		for _, e := range pp.Records {
			if _, off, ok := engine.SkipOffset(e.Key, e.Value); ok {
				got = append(got, off)
			}
		}
		if want := p == 1; (len(got) == 1 && got[0] == 175) != want || len(got) > 1 || (!want && len(got) > 0) {
			t.Errorf("partition %d: skips %v", p, got)
		}
	}
}
