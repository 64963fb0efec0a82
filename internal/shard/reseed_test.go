package shard_test

import (
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// The re-seed marks survive a reopen (a crash between BeginReseed and
// EndReseed), EndReseed clears the mark with the new offset, and Records
// returns every changelogged entry, metadata last, without the local keys.
func TestReseedMarks(t *testing.T) {
	store := kv.NewMemory()
	open := func() *shard.Shard {
		s, err := shard.OpenShard(shard.ShardOptions{Backend: noClose{store}})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	meta, state := changelogfmt.MetaKey("engine/input_offset"), []byte{byte(changelog.KindState), 0, 0, 0, 1, 1, 'a'}
	noErr(t, s.ApplyChangelog([]changelog.Record{{Key: meta, Value: []byte("m")}, {Key: state, Value: []byte("v")}}, 11))
	if p, err := s.ReseedPending(); err != nil || p {
		t.Fatalf("ReseedPending = %v, %v on a new shard", p, err)
	}
	noErr(t, s.BeginReseed())
	recs, err := s.Records()
	noErr(t, err)
	if len(recs) != 2 || string(recs[0].Key) != string(state) || string(recs[1].Key) != string(meta) {
		t.Fatalf("Records = %v, want the state entry then the metadata", recs)
	}
	noErr(t, s.Close())

	s = open() // "crash" before EndReseed
	if p, err := s.ReseedPending(); err != nil || !p {
		t.Fatalf("ReseedPending = %v, %v after a reopen, want true", p, err)
	}
	if s.ChangelogOffset() != 11 {
		t.Fatalf("offset %d, want the old 11 until EndReseed", s.ChangelogOffset())
	}
	noErr(t, s.EndReseed(3))
	noErr(t, s.Close())

	s = open()
	defer s.Close()
	if p, err := s.ReseedPending(); err != nil || p || s.ChangelogOffset() != 3 {
		t.Fatalf("after EndReseed(3): pending %v (%v), offset %d", p, err, s.ChangelogOffset())
	}
}
