package shard

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/kstate/kstate/state"
)

// The local shards of an application, seen from outside a shard: which
// partitions have a shard directory under <StateDir>/<app>, the position
// hint each holds, and their removal (standby cleanup, internal/engine's
// ShardPositions).

// positionHintFile holds a shard's changelog position as decimal text: a
// hint for the group's balancer, written by the engine on close and every
// few seconds, never read by the shard itself (its offset is in the
// store).
const positionHintFile = "POSITION.kstate"

// LocalShards returns the partitions that have a shard directory (named by
// its partition number, holding the shard lock file) under appDir. A
// missing appDir has none.
func LocalShards(appDir string) ([]int32, error) {
	entries, err := os.ReadDir(appDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("state: list the shards of %s: %w", appDir, err)
	}
	var out []int32
	for _, e := range entries {
		n, err := strconv.ParseInt(e.Name(), 10, 32)
		if err != nil || n < 0 || !e.IsDir() || strconv.FormatInt(n, 10) != e.Name() {
			continue
		}
		if _, err := os.Lstat(filepath.Join(appDir, e.Name(), lockFile)); err != nil {
			continue
		}
		out = append(out, int32(n))
	}
	return out, nil
}

// ReadPositionHint returns the position hint of the shard in dir; false
// when it has none (a shard of an older release, or never closed) or it
// does not parse.
func ReadPositionHint(dir string) (int64, bool) {
	b, err := os.ReadFile(filepath.Join(dir, positionHintFile))
	if err != nil {
		return 0, false
	}
	n, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
	if err != nil || n < 0 {
		return 0, false
	}
	return n, true
}

// WritePositionHint replaces the position hint of the shard in dir
// (a temporary file renamed over it; not synced: after a power loss the
// hint may be older or missing, which only makes it a worse hint).
func WritePositionHint(dir string, pos int64) error {
	path := filepath.Join(dir, positionHintFile)
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(strconv.FormatInt(pos, 10)+"\n"), 0o644); err != nil {
		return fmt.Errorf("state: write the position hint %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fmt.Errorf("state: write the position hint %s: %w", path, err)
	}
	return nil
}

// RemoveShardDir deletes the shard directory dir while holding its lock,
// so that it never deletes a shard that is open (in this process or
// another): a locked shard is left alone with an error wrapping
// state.ErrLocked. A missing dir is not an error.
func RemoveShardDir(dir string) error {
	f, err := os.OpenFile(filepath.Join(dir, lockFile), os.O_RDWR, 0o644)
	if errors.Is(err, fs.ErrNotExist) {
		if _, serr := os.Lstat(dir); errors.Is(serr, fs.ErrNotExist) {
			return nil
		}
		return fmt.Errorf("state: remove shard %s: no shard lock file %s: not removed", dir, lockFile)
	}
	if err != nil {
		return fmt.Errorf("state: remove shard %s: %w", dir, err)
	}
	defer f.Close()
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		if errors.Is(err, syscall.EWOULDBLOCK) {
			return fmt.Errorf("%w: %s is open: not removed", state.ErrLocked, dir)
		}
		return fmt.Errorf("state: remove shard %s: lock: %w", dir, err)
	}
	// Renamed first (atomic), then deleted: a crash in the middle leaves
	// a directory RemoveLeftovers deletes, never a half-deleted shard
	// under the partition's name.
	trash := filepath.Join(filepath.Dir(dir), deletingPrefix+filepath.Base(dir))
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("state: remove shard %s: %w", dir, err)
	}
	if err := os.Rename(dir, trash); err != nil {
		return fmt.Errorf("state: remove shard %s: %w", dir, err)
	}
	if err := os.RemoveAll(trash); err != nil {
		return fmt.Errorf("state: remove shard %s (renamed %s): %w", dir, trash, err)
	}
	return nil
}

// deletingPrefix names a shard directory being removed (RemoveShardDir).
const deletingPrefix = ".deleting-"

// RemoveLeftovers deletes what a RemoveShardDir interrupted by a crash
// left under appDir.
func RemoveLeftovers(appDir string) error {
	entries, err := os.ReadDir(appDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("state: list %s: %w", appDir, err)
	}
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), deletingPrefix) {
			if err := os.RemoveAll(filepath.Join(appDir, e.Name())); err != nil {
				return fmt.Errorf("state: remove %s: %w", filepath.Join(appDir, e.Name()), err)
			}
		}
	}
	return nil
}
