package shard_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// A shard whose store files are damaged (a user's copy gone wrong, a disk
// that lost a write, a file deleted by hand): with RebuildCorrupt, as the
// engine opens shards, the store is deleted and opened empty at changelog
// offset 0, so the restore reads the whole changelog; without it (a state
// reader), OpenShard fails and leaves the files alone. An error that is
// not damage (the backend configured differently) never deletes anything.
func TestRebuildCorruptStore(t *testing.T) {
	for _, be := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
		t.Run(string(be), func(t *testing.T) {
			if be == kv.BackendRocksDB && !kv.RocksDBAvailable {
				t.Skip("RocksDB is not compiled in")
			}
			dir := filepath.Join(t.TempDir(), "0")
			s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: be})
			if err != nil {
				t.Fatal(err)
			}
			s.Begin(0)
			if err := s.Put([]byte("\x01k"), []byte("v")); err != nil {
				t.Fatal(err)
			}
			if _, err := s.Finish(); err != nil {
				t.Fatal(err)
			}
			if err := s.Commit(42); err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}

			// Not damage: another backend configured. Nothing deleted.
			other := kv.BackendPebble
			if be == kv.BackendPebble {
				other = kv.BackendRocksDB
			}
			if other.Check() == nil {
				if _, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: other, RebuildCorrupt: true}); !errors.Is(err, state.ErrBackendMismatch) {
					t.Fatalf("open with the other backend: %v; want ErrBackendMismatch", err)
				}
			}

			// Damage: the MANIFEST truncated.
			manifests, _ := filepath.Glob(filepath.Join(dir, be.Subdir(), "MANIFEST-*"))
			if len(manifests) == 0 {
				t.Fatalf("no MANIFEST in %s", filepath.Join(dir, be.Subdir()))
			}
			for _, m := range manifests {
				if err := os.Truncate(m, 10); err != nil {
					t.Fatal(err)
				}
			}
			_, err = shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: be})
			if err == nil || !kv.IsCorrupt(err) {
				t.Fatalf("open of the damaged store without RebuildCorrupt: %v; want a corruption error", err)
			}
			if _, serr := os.Stat(manifests[0]); serr != nil {
				t.Fatalf("the failed open without RebuildCorrupt removed the files: %v", serr)
			}
			t.Logf("without RebuildCorrupt: %v", err)

			s, err = shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: be, RebuildCorrupt: true})
			if err != nil {
				t.Fatalf("open with RebuildCorrupt: %v", err)
			}
			defer s.Close()
			if why := s.Rebuilt(); why == nil || !strings.Contains(why.Error(), dir) {
				t.Errorf("Rebuilt() = %v; want the damage, naming the directory", why)
			}
			if got := s.ChangelogOffset(); got != 0 {
				t.Errorf("rebuilt shard at changelog offset %d; want 0 (restore from the start)", got)
			}
			if _, ok, err := s.Get([]byte("\x01k")); err != nil || ok {
				t.Errorf("rebuilt shard still has the key (ok %v, err %v)", ok, err)
			}
		})
	}
}

// A store whose recorded changelog offset is damaged is rebuilt the same
// way; an intact shard reports nothing rebuilt.
func TestRebuildCorruptOffset(t *testing.T) {
	be := kv.DefaultBackend() // the shard's (Pebble with KSTATE_TEST_STATE_BACKEND=pebble)
	dir := filepath.Join(t.TempDir(), "0")
	s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, RebuildCorrupt: true})
	if err != nil {
		t.Fatal(err)
	}
	if s.Rebuilt() != nil {
		t.Fatalf("a new shard reports Rebuilt() = %v", s.Rebuilt())
	}
	s.Close()
	st, err := kv.OpenBackend(be, filepath.Join(dir, be.Subdir()), nil, false)
	if err != nil {
		t.Fatal(err)
	}
	var b kv.Batch
	b.Put([]byte(shard.OffsetKeyForTest), []byte{1, 2, 3})
	if err := st.Write(&b, kv.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	st.Close()
	if _, err := shard.OpenShard(shard.ShardOptions{Dir: dir}); !errors.Is(err, state.ErrCorrupt) {
		t.Fatalf("open without RebuildCorrupt: %v; want ErrCorrupt", err)
	}
	s, err = shard.OpenShard(shard.ShardOptions{Dir: dir, RebuildCorrupt: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if !errors.Is(s.Rebuilt(), state.ErrCorrupt) || s.ChangelogOffset() != 0 {
		t.Fatalf("Rebuilt() = %v at offset %d; want ErrCorrupt at 0", s.Rebuilt(), s.ChangelogOffset())
	}
}
