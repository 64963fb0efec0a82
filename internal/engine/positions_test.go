package engine

import (
	"context"
	"errors"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// makeShardDir creates a shard directory of partition p under appDir as
// the shard does (its lock file), with a position hint when pos >= 0.
func makeShardDir(t *testing.T, appDir string, p int, pos int64) string {
	t.Helper()
	dir := filepath.Join(appDir, itoa(p))
	if err := os.MkdirAll(filepath.Join(dir, "store"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"LOCK.kstate", "store/data"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if pos >= 0 {
		if err := shard.WritePositionHint(dir, pos); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

func itoa(p int) string { return strconv.Itoa(p) }

// TestShardPositionsFromDisk: at start the positions are the hint files of
// the shard directories found under the application's directory (a shard
// without a hint has no position; anything else is ignored), and the
// active tasks and standbys update them and rewrite the hints (at once
// when a shard is closed, at most every hintEvery while in use).
func TestShardPositionsFromDisk(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := t.TempDir()
		makeShardDir(t, app, 0, 120)
		makeShardDir(t, app, 1, -1)
		makeShardDir(t, app, 3, 7)
		if err := os.MkdirAll(filepath.Join(app, "notashard"), 0o755); err != nil {
			t.Fatal(err)
		}
		clock := realClock{start: time.Now()}
		pos, err := NewShardPositions(ShardPositionsConfig{Dir: app, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := pos.Snapshot(), map[int32]int64{0: 120, 3: 7}; !maps.Equal(got, want) {
			t.Fatalf("Snapshot at start = %v, want %v", got, want)
		}
		ctx := context.Background()
		if err := pos.acquireActive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		pos.set(1, 50, false) // the first position is written at once
		pos.set(1, 60, false) // within hintEvery: not written
		if h, _ := shard.ReadPositionHint(filepath.Join(app, "1")); h != 50 {
			t.Errorf("hint after two commits within %v = %d, want 50", hintEvery, h)
		}
		time.Sleep(hintEvery)
		pos.set(1, 70, false)
		if h, _ := shard.ReadPositionHint(filepath.Join(app, "1")); h != 70 {
			t.Errorf("hint after %v = %d, want 70", hintEvery, h)
		}
		pos.set(1, 75, false)
		pos.releaseActive(1, 80) // closed: written at once
		if h, _ := shard.ReadPositionHint(filepath.Join(app, "1")); h != 80 {
			t.Errorf("hint after close = %d, want 80", h)
		}
		if got, want := pos.Snapshot(), map[int32]int64{0: 120, 1: 80, 3: 7}; !maps.Equal(got, want) {
			t.Fatalf("Snapshot = %v, want %v", got, want)
		}
		// A new process reads them back.
		again, err := NewShardPositions(ShardPositionsConfig{Dir: app, Clock: clock})
		if err != nil {
			t.Fatal(err)
		}
		if got, want := again.Snapshot(), map[int32]int64{0: 120, 1: 80, 3: 7}; !maps.Equal(got, want) {
			t.Fatalf("Snapshot after a restart = %v, want %v", got, want)
		}
	})
}

// TestShardPositionsCleanup: a local shard neither active nor standby is
// deleted CleanupDelay after it was last used (not a moment before); one
// in use in the process never is, one locked by another process is left
// alone (and retried), and an active task that needs a shard being
// deleted waits for the deletion.
func TestShardPositionsCleanup(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		app := t.TempDir()
		d0 := makeShardDir(t, app, 0, 10) // idle from the start
		d1 := makeShardDir(t, app, 1, 20) // active
		d2 := makeShardDir(t, app, 2, 30) // standby, then dropped
		d3 := makeShardDir(t, app, 3, 40) // locked by "another process"
		lock, err := shard.OpenShard(shard.ShardOptions{Dir: d3, Backend: kv.NewMemory()})
		if err != nil {
			t.Fatal(err)
		}
		defer lock.Close()
		clock := realClock{start: time.Now()}
		pos, err := NewShardPositions(ShardPositionsConfig{Dir: app, Clock: clock, CleanupDelay: 10 * time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		exists := func(dir string) bool { _, err := os.Stat(dir); return err == nil }
		ctx := context.Background()
		if err := pos.acquireActive(ctx, 1); err != nil {
			t.Fatal(err)
		}
		w := &standbys{}
		if !pos.tryStandby(2, w) {
			t.Fatal("tryStandby(2) refused an idle shard")
		}
		if pos.tryStandby(1, w) {
			t.Fatal("tryStandby(1) took a shard active in the process")
		}
		pos.start()
		defer pos.stop()

		time.Sleep(5 * time.Minute)
		pos.releaseStandby(2, w, 31)
		time.Sleep(5*time.Minute - time.Second)
		synctest.Wait()
		if !exists(d0) || !exists(d2) {
			t.Fatal("a shard was deleted before the cleanup delay")
		}
		time.Sleep(time.Second)
		synctest.Wait()
		if exists(d0) {
			t.Error("shard 0, idle for the cleanup delay, was not deleted")
		}
		if !exists(d1) || !exists(d2) || !exists(d3) {
			t.Errorf("deleted too much: active %v, standby dropped 5m ago %v, locked %v", exists(d1), exists(d2), exists(d3))
		}
		time.Sleep(5 * time.Minute)
		synctest.Wait()
		if exists(d2) {
			t.Error("shard 2, dropped as a standby 10m ago, was not deleted")
		}
		if !exists(d3) {
			t.Error("shard 3, locked by another process, was deleted")
		}
		time.Sleep(time.Hour)
		synctest.Wait()
		if !exists(d1) {
			t.Error("shard 1, active, was deleted")
		}
		if got, want := pos.Snapshot(), map[int32]int64{1: 20, 3: 40}; !maps.Equal(got, want) {
			t.Errorf("Snapshot = %v, want %v", got, want)
		}
		// Unlocked, shard 3 goes at its next try.
		lock.Close()
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if exists(d3) {
			t.Error("shard 3, unlocked, was not deleted at the next try")
		}
		pos.releaseActive(1, 25)
		time.Sleep(10 * time.Minute)
		synctest.Wait()
		if exists(d1) {
			t.Error("shard 1, released 10m ago, was not deleted")
		}
		if got := pos.Snapshot(); len(got) != 0 {
			t.Errorf("Snapshot = %v, want none", got)
		}
	})
}

// TestAcquireActiveWaitsForDeletion: a task that needs a shard while the
// cleanup deletes it waits until it is gone (then opens a new one), and no
// standby takes a shard an active task waits for.
func TestAcquireActiveWaitsForDeletion(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		release := make(chan struct{})
		removing := make(chan struct{})
		clock := realClock{start: time.Now()}
		pos, err := NewShardPositions(ShardPositionsConfig{Clock: clock, CleanupDelay: time.Minute,
			Remove: func(p int32) error { close(removing); <-release; return nil }})
		if err != nil {
			t.Fatal(err)
		}
		pos.Seed(4, 99)
		pos.start()
		defer pos.stop()
		time.Sleep(time.Minute)
		<-removing
		acquired := make(chan error, 1)
		go func() { acquired <- pos.acquireActive(context.Background(), 4) }()
		synctest.Wait()
		select {
		case err := <-acquired:
			t.Fatalf("acquireActive returned (%v) while the shard was being deleted", err)
		default:
		}
		if pos.tryStandby(4, &standbys{}) {
			t.Fatal("a standby took a shard an active task waits for")
		}
		close(release)
		if err := <-acquired; err != nil {
			t.Fatal(err)
		}
		if _, ok := pos.Snapshot()[4]; ok {
			t.Error("the deleted shard's position is still reported")
		}
		pos.releaseActive(4, 3)
		if got := pos.Snapshot()[4]; got != 3 {
			t.Errorf("position after the new shard closed = %d, want 3", got)
		}
	})
}

// TestRemoveShardDirLocked: a shard open anywhere is never removed.
func TestRemoveShardDirLocked(t *testing.T) {
	dir := makeShardDir(t, t.TempDir(), 5, 1)
	sh, err := shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: kv.NewMemory()})
	if err != nil {
		t.Fatal(err)
	}
	if err := shard.RemoveShardDir(dir); err == nil || !errors.Is(err, state.ErrLocked) {
		t.Fatalf("RemoveShardDir of an open shard: %v, want state.ErrLocked", err)
	}
	sh.Close()
	if err := shard.RemoveShardDir(dir); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("after RemoveShardDir: %v", err)
	}
	if err := shard.RemoveShardDir(dir); err != nil {
		t.Fatalf("RemoveShardDir of a missing shard: %v", err)
	}
}
