package shard_test

import (
	"bytes"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

var layoutKey = changelogfmt.MetaKey(changelog.LayoutMeta)

// layoutRecords returns the layout entries among recs and whether the
// first record is one.
func layoutRecords(recs []changelog.Record) (vals []string, first bool) {
	for i, r := range recs {
		if bytes.Equal(r.Key, layoutKey) {
			vals = append(vals, string(r.Value))
			first = first || i == 0
		}
	}
	return vals, first
}

// A shard records its changelog layout in the first batch it commits, as
// that batch's first record, and not again once the store records it: a
// restore of that changelog and a reopened store both hold it. A shard
// restored from an older changelog (no entry), or whose first batch was
// aborted, records it in its next committed batch.
func TestLayoutRecordedOnce(t *testing.T) {
	dir := t.TempDir()
	s, err := shard.OpenShard(shard.ShardOptions{Dir: dir})
	noErr(t, err)
	var l log
	put := func(s *shard.Shard, now int64) []changelog.Record {
		return commit(t, s, &l, now, func() {
			s.SetCurrentKey([]byte("k"))
			noErr(t, s.PutMeta("engine/x", []byte{byte(now)}))
		})
	}

	s.Begin(0)
	s.Abort()
	recs := put(s, 1)
	if vals, first := layoutRecords(recs); len(vals) != 1 || vals[0] != "2" || !first {
		t.Fatalf("first batch after an abort: layout records %q (first record: %v), want one \"2\" first", vals, first)
	}
	if vals, _ := layoutRecords(put(s, 2)); len(vals) != 0 {
		t.Fatalf("second batch: layout records %q, want none", vals)
	}
	noErr(t, s.Close())

	s, err = shard.OpenShard(shard.ShardOptions{Dir: dir})
	noErr(t, err)
	defer s.Close()
	if vals, _ := layoutRecords(put(s, 3)); len(vals) != 0 {
		t.Fatalf("after reopening: layout records %q, want none", vals)
	}

	restored := openMem(t, false)
	noErr(t, restored.ApplyChangelog(l.recs, l.next()))
	if vals, _ := layoutRecords(put(restored, 4)); len(vals) != 0 {
		t.Fatalf("after a restore of the changelog: layout records %q, want none", vals)
	}

	var old []changelog.Record // the changelog of a build before the entry
	for _, r := range l.recs {
		if !bytes.Equal(r.Key, layoutKey) {
			old = append(old, r)
		}
	}
	upgraded := openMem(t, false)
	noErr(t, upgraded.ApplyChangelog(old, int64(len(old))))
	if vals, first := layoutRecords(put(upgraded, 5)); len(vals) != 1 || !first {
		t.Fatalf("after a restore of an older changelog: layout records %q (first: %v), want one, first", vals, first)
	}

	noErr(t, upgraded.BeginReseed())
	seed := must[[]changelog.Record](t)(upgraded.Records())
	if vals, first := layoutRecords(seed); len(vals) != 1 || !first {
		t.Fatalf("Records: layout records %q (first: %v), want one, first", vals, first)
	}
}

// A changelog or a store that records a newer layout than this build's is
// refused, naming both layouts, before anything of it is written: the
// records before the entry in the same chunk are not applied either, and
// the shard keeps its offset.
func TestLayoutNewerRefused(t *testing.T) {
	s := openMem(t, false)
	var l log
	commit(t, s, &l, 1, func() { noErr(t, s.PutMeta("engine/x", []byte{1})) })
	before := dump(t, s)
	newer := []changelog.Record{
		{Key: changelogfmt.MetaKey("engine/y"), Value: []byte{2}, Offset: 5},
		{Key: layoutKey, Value: []byte("3"), Offset: 6},
		{Key: changelogfmt.MetaKey("engine/z"), Value: []byte{3}, Offset: 7},
	}
	wantErr(t, s.ApplyChangelog(newer, 8), changelog.ErrLayout, "layout 3", "up to 2", "offset 6")
	if got := dump(t, s); len(got) != len(before) {
		t.Fatalf("a refused chunk changed the store: %d entries, want %d", len(got), len(before))
	}
	if got := s.ChangelogOffset(); got != l.next() {
		t.Fatalf("offset after a refused chunk: %d, want %d", got, l.next())
	}

	dir := t.TempDir()
	be := kv.DefaultBackend() // the shard's (Pebble with KSTATE_TEST_STATE_BACKEND=pebble)
	st, err := kv.OpenBackend(be, filepath.Join(dir, be.Subdir()), nil, false)
	noErr(t, err)
	var b kv.Batch
	b.Put(layoutKey, []byte("3"))
	noErr(t, st.Write(&b, kv.WriteOptions{}))
	noErr(t, st.Close())
	_, err = shard.OpenShard(shard.ShardOptions{Dir: dir})
	wantErr(t, err, changelog.ErrLayout, "layout 3", "up to 2", "its store", dir)

	bad := openMem(t, false)
	wantErr(t, bad.ApplyChangelog([]changelog.Record{{Key: layoutKey, Value: []byte("x")}}, 1), nil, "not a layout number")
}
