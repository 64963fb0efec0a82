package shard_test

import (
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// TestLocalShards: the shard directories of an application are the ones
// named by a partition number holding the shard lock file; their position
// hints round-trip; RemoveShardDir removes a closed shard (renamed first)
// and RemoveLeftovers what an interrupted removal left.
func TestLocalShards(t *testing.T) {
	app := t.TempDir()
	if got, err := shard.LocalShards(filepath.Join(app, "missing")); err != nil || got != nil {
		t.Fatalf("missing directory: %v, %v", got, err)
	}
	for _, p := range []string{"0", "2"} {
		sh, err := shard.OpenShard(shard.ShardOptions{Dir: filepath.Join(app, p), Backend: kv.NewMemory()})
		if err != nil {
			t.Fatal(err)
		}
		sh.Close()
	}
	for _, d := range []string{"7", "01", "x", ".deleting-3"} { // no lock file, or not a partition
		if err := os.MkdirAll(filepath.Join(app, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	got, err := shard.LocalShards(app)
	if err != nil || !slices.Equal(got, []int32{0, 2}) {
		t.Fatalf("LocalShards = %v, %v; want [0 2]", got, err)
	}
	if _, ok := shard.ReadPositionHint(filepath.Join(app, "0")); ok {
		t.Error("a hint read from a shard that has none")
	}
	if err := shard.WritePositionHint(filepath.Join(app, "0"), 1234); err != nil {
		t.Fatal(err)
	}
	if n, ok := shard.ReadPositionHint(filepath.Join(app, "0")); !ok || n != 1234 {
		t.Errorf("hint = %d, %v; want 1234", n, ok)
	}
	if err := shard.RemoveShardDir(filepath.Join(app, "0")); err != nil {
		t.Fatal(err)
	}
	if err := shard.RemoveShardDir(filepath.Join(app, "x")); err == nil {
		t.Error("RemoveShardDir removed a directory without a shard lock file")
	}
	if err := shard.RemoveLeftovers(app); err != nil {
		t.Fatal(err)
	}
	ents, _ := os.ReadDir(app)
	var names []string
	for _, e := range ents {
		names = append(names, e.Name())
	}
	if want := []string{"01", "2", "7", "x"}; !slices.Equal(names, want) {
		t.Errorf("left %v, want %v", names, want)
	}
}
