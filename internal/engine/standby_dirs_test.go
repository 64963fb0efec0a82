package engine_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kstate/kstate/internal/engine/enginetest"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/state"
)

// TestStandbyShardDirectories runs the standby protocol on shards with real
// directories (flock'ed while open, position hints), in two pipelines of
// one process: the standby holds its shard's lock; the sibling pipeline
// that becomes p0's owner gets the shard from it at once (no lock wait)
// and restores only the tail; the hints follow the positions; and the
// shard no longer used is deleted after the cleanup delay, never before,
// while the active one stays.
func TestStandbyShardDirectories(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		env := enginetest.NewEnv(2, testlog.New(t))
		defer env.Close()
		env.Dirs = t.TempDir()
		run := func(cmd string) string {
			t.Helper()
			out, err := env.Exec(cmd)
			if err != nil {
				t.Fatalf("%s: %v", cmd, err)
			}
			return out
		}
		p0 := filepath.Join(env.Dirs, "a1", "0")
		p1 := filepath.Join(env.Dirs, "a1", "1")
		locked := func(dir string) bool {
			sh, err := shard.OpenShard(shard.ShardOptions{Dir: dir, Backend: kv.NewMemory()})
			if err == nil {
				sh.Close()
				return false
			}
			if !errors.Is(err, state.ErrLocked) {
				t.Fatalf("open %s: %v", dir, err)
			}
			return true
		}
		hint := func(dir string) int64 {
			n, ok := shard.ReadPositionHint(dir)
			if !ok {
				t.Fatalf("%s has no position hint", dir)
			}
			return n
		}
		for _, cmd := range []string{"start i1", "start a1 cleanup=10m", "start a2 process=a1",
			"assign i1 p0", "assign a1 p1", "poll i1 2", "poll a1 2", "input p0 a b a", "poll i1",
			"standby a1 p0", "poll a1"} {
			run(cmd)
		}
		if !locked(p0) {
			t.Fatal("the standby's shard directory is not locked")
		}
		// The hint is written at once when the shard opens, then at most
		// every 5s while in use: the next refresh after 5s writes 12 (the
		// first batch's records begin with the changelog layout entry).
		if got := hint(p0); got != 0 {
			t.Errorf("standby's position hint = %d, want 0 (as opened)", got)
		}
		run("advance 5s")
		if got := hint(p0); got != 12 {
			t.Errorf("standby's position hint after 5s = %d, want 12", got)
		}
		for _, cmd := range []string{"input p0 c", "poll i1", "revoke i1 p0", "poll i1", "assign a2 p0"} {
			run(cmd)
		}
		out := run("poll a2 2")
		if !strings.Contains(out, "a2: restore p0 from 12 to 16") || !strings.Contains(out, "a2: resume [0]") {
			t.Fatalf("p0 moving to the sibling pipeline:\n%s\nwant a restore of the tail from 12 and p0 resumed", out)
		}
		if got := run("metrics a2"); !strings.Contains(got, "restored=3 ") {
			t.Errorf("metrics a2: %s, want the tail's 3 records restored", got)
		}
		run("input p0 a")
		run("poll a2")
		if got, want := run("outputs"), "a=[1 2 3] b=[1] c=[1]"; got != want {
			t.Errorf("outputs = %s, want %s", got, want)
		}
		if !locked(p0) {
			t.Fatal("the active shard's directory is not locked")
		}
		// p0 leaves the process: a1's standby (its set still names p0)
		// takes the shard back and reads the last commit marker, then is
		// dropped too; the hint is written as it closes.
		run("revoke a2 p0")
		run("standby a1")
		run("poll a2")
		run("poll a1")
		if locked(p0) {
			t.Fatal("p0's shard is still locked after it left the process")
		}
		if got := hint(p0); got != 20 {
			t.Errorf("position hint after close = %d, want 20", got)
		}
		if got := run("positions a1"); got != "p0=20 p1=6" {
			t.Errorf("positions a1 = %q, want p0=20 p1=6", got)
		}
		env.Clock.Advance(10*time.Minute - time.Second)
		synctest.Wait()
		if _, err := os.Stat(p0); err != nil {
			t.Fatalf("p0's shard deleted before the cleanup delay: %v", err)
		}
		run("advance 1s")
		if _, err := os.Stat(p0); !os.IsNotExist(err) {
			t.Fatalf("p0's shard not deleted after the cleanup delay: %v", err)
		}
		if _, err := os.Stat(p1); err != nil || !locked(p1) {
			t.Fatalf("the active shard p1: %v (locked %v)", err, err == nil && locked(p1))
		}
		if got := run("positions a1"); got != "p1=6" {
			t.Errorf("positions a1 = %q, want p1=6", got)
		}
	})
}
