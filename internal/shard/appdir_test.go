package shard_test

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/kstate/kstate/internal/shard"
)

// TestAppDirMarker: MarkAppDir creates the directory and its marker (and
// adopts a directory of an older release); CheckAppDir accepts a marked
// directory, an empty one and the bare shard layout, and refuses anything
// else with ErrNotAppDir.
func TestAppDirMarker(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "app")
	if err := shard.CheckAppDir(dir, "app"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing dir: %v, want ErrNotExist", err)
	}
	if err := shard.MarkAppDir(dir, "app"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "anything"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := shard.CheckAppDir(dir, "app"); err != nil {
		t.Fatalf("marked dir: %v", err)
	}
	if err := shard.CheckAppDir(dir, "other"); !errors.Is(err, shard.ErrNotAppDir) {
		t.Fatalf("marked for app, checked for other: %v, want ErrNotAppDir", err)
	}

	// An older release's directory: shards only, no marker.
	old := filepath.Join(root, "old")
	if err := shard.CheckAppDir(old, "old"); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("missing: %v", err)
	}
	if err := os.MkdirAll(old, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := shard.CheckAppDir(old, "old"); err != nil {
		t.Fatalf("empty dir: %v", err)
	}
	s, err := shard.OpenShard(shard.ShardOptions{Dir: filepath.Join(old, "0")})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	if err := shard.CheckAppDir(old, "old"); err != nil {
		t.Fatalf("a real shard directory: %v", err)
	}
	for _, bad := range []string{"notes.txt", "01", "-1"} {
		p := filepath.Join(old, bad)
		if err := os.WriteFile(p, nil, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := shard.CheckAppDir(old, "old"); !errors.Is(err, shard.ErrNotAppDir) {
			t.Fatalf("with %q: %v, want ErrNotAppDir", bad, err)
		}
		os.Remove(p)
	}
	// Adopted by the next Run.
	if err := shard.MarkAppDir(old, "old"); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(old, "notes.txt"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := shard.CheckAppDir(old, "old"); err != nil {
		t.Fatalf("adopted: %v", err)
	}
	// A file is not a directory.
	f := filepath.Join(root, "file")
	if err := os.WriteFile(f, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := shard.CheckAppDir(f, "file"); !errors.Is(err, shard.ErrNotAppDir) {
		t.Fatalf("a file: %v", err)
	}
}
