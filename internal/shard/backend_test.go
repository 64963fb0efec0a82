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

// A shard keeps the backend it was created with: reopening it with the other
// one fails at open with ErrBackendMismatch naming both, and leaves the
// directory as it was.
func TestShardBackendMismatch(t *testing.T) {
	backends := []kv.Backend{kv.BackendPebble}
	if kv.RocksDBAvailable {
		backends = append(backends, kv.BackendRocksDB)
	}
	for _, first := range backends {
		t.Run(string(first), func(t *testing.T) {
			dir := t.TempDir()
			s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: first})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Close(); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(filepath.Join(dir, "BACKEND.kstate"))
			if err != nil || strings.TrimSpace(string(b)) != string(first) {
				t.Fatalf("marker: %q, %v", b, err)
			}
			other := kv.BackendRocksDB
			if first == kv.BackendRocksDB {
				other = kv.BackendPebble
			}
			_, err = shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: other})
			if !errors.Is(err, state.ErrBackendMismatch) && (other == kv.BackendPebble || kv.RocksDBAvailable) {
				t.Fatalf("reopen with %s: %v, want ErrBackendMismatch", other, err)
			}
			if err != nil && errors.Is(err, state.ErrBackendMismatch) &&
				(!strings.Contains(err.Error(), string(first)) || !strings.Contains(err.Error(), string(other))) {
				t.Fatalf("error does not name both backends: %v", err)
			}
			if _, err := os.Stat(filepath.Join(dir, other.Subdir())); err == nil {
				t.Fatalf("the refused open created %s", other.Subdir())
			}
			// The same backend still opens, and so does the default when it matches.
			s, err = shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: first})
			if err != nil {
				t.Fatal(err)
			}
			s.Close()
		})
	}
	// A shard created before the marker existed (a rocksdb subdirectory and
	// no marker) counts as RocksDB.
	if kv.RocksDBAvailable {
		dir := t.TempDir()
		s, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: kv.BackendRocksDB})
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
		os.Remove(filepath.Join(dir, "BACKEND.kstate"))
		if _, err := shard.OpenShard(shard.ShardOptions{Dir: dir, StoreBackend: kv.BackendPebble}); !errors.Is(err, state.ErrBackendMismatch) {
			t.Fatalf("pebble over an unmarked rocksdb shard: %v", err)
		}
	}
}
