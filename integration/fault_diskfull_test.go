package integration

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"os/exec"
	"path/filepath"
	"regexp"
	"syscall"
	"testing"
	"time"
)

// A full disk under a running application, on a real broker: the
// application (integration/testapp in a child process, so that an abort
// shows as a signal instead of killing the test binary) runs the eos
// processor with a large pad variable per key, its StateDir on a small
// tmpfs. The shard's write after a committed transaction fails: Run must
// return an error naming the shard and the partition and saying the disk
// is full, the process must exit 1 (not a signal). Once space returns the
// same StateDir restarts, restores the tail the shard missed from the
// changelog, and the outputs, the changelog state and the local shards
// are exact.

// mountTmpfs mounts a tmpfs of size bytes on a fresh directory, or skips
// loudly when this process may not mount.
func mountTmpfs(t *testing.T, size int) string {
	t.Helper()
	dir := t.TempDir()
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", fmt.Sprintf("size=%d", size), "tmpfs", dir).CombinedOutput(); err != nil {
		t.Skipf("SKIPPED LOUDLY: cannot mount a small tmpfs to fill (%v: %s); the full-disk test needs root and mount permission", err, bytes.TrimSpace(out))
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", dir).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v: %s", dir, err, out)
		}
	})
	return dir
}

var runFailedRe = regexp.MustCompile(`testapp: (.*)`)

func TestDiskFullApplication(t *testing.T) {
	t.Parallel()
	const (
		parts   = 2
		tmpfs   = 6 << 20
		pad     = 32 << 10
		rows    = 800
		seed    = 1
		timeout = 3 * time.Minute
	)
	mnt := mountTmpfs(t, tmpfs)
	rng := rand.New(rand.NewPCG(seed, 2))
	e := newSpecEnv(t, parts)
	in := newEOSInput(t, e, parts, 16)
	args := eosChildArgs{brokers: e.brokers, app: e.app, instance: "i1", stateDir: mnt,
		in: e.in, out: e.out, maxBatch: 25, pad: pad}
	in.produce(t, rng, rows)

	// Full: Run fails with an error, the process exits 1.
	c := startEOSChild(t, args)
	if !c.wait(timeout) {
		c.dump(t)
		t.Fatalf("the application still runs %v after it was started on a %d-byte tmpfs with %d rows of %d-byte state", timeout, tmpfs, rows, pad)
	}
	ws, _ := c.state.Sys().(syscall.WaitStatus)
	if ws.Signaled() || ws.ExitStatus() != 1 {
		c.dump(t)
		t.Fatalf("on a full disk the application ended with %v (signaled %v), want exit status 1 from an error of Run", c.state, ws.Signaled())
	}
	m := c.find(runFailedRe)
	if m == nil {
		c.dump(t)
		t.Fatal("exit status 1 without a \"testapp: <error of Run>\" line")
	}
	if testing.Verbose() {
		c.dump(t)
	}
	msg := m[1]
	t.Logf("Run returned: %s", msg)
	// The engine's own words name the partition and the shard directory
	// (not only RocksDB's file name), and the cause is the disk.
	shardDir := `^kstate: partition (\d): apply committed batch to the shard ` + regexp.QuoteMeta(filepath.Join(mnt, e.app)) + `/(\d) \(Kafka has the batch`
	for _, want := range []string{shardDir, `(?i)no space left on device`} {
		if !regexp.MustCompile(want).MatchString(msg) {
			t.Errorf("the error of Run does not match %q: %s", want, msg)
		}
	}
	if sm := regexp.MustCompile(shardDir).FindStringSubmatch(msg); sm != nil && sm[1] != sm[2] {
		t.Errorf("the error names partition %s but the shard of partition %s: %s", sm[1], sm[2], msg)
	}

	// Space returns.
	if out, err := exec.Command("mount", "-o", "remount,size=512m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount bigger: %v: %s", err, out)
	}
	model := in.model()
	again := startEOSChild(t, args)
	waitEOSOutputs(t, e, model, seed, timeout, again)
	// And it keeps processing.
	in.produce(t, rng, 100)
	model = in.model()
	waitEOSOutputs(t, e, model, seed, timeout, again)
	restored := again.metrics().restored
	again.stop(t, 30*time.Second)
	t.Logf("after the restart: %d changelog records restored; %d input rows, %d output rows", restored, len(in.rows), model.total)
	if restored == 0 {
		t.Error("the restart restored nothing from the changelog, but the shard missed the batch whose local write failed")
	}
	checkEOS(t, e, model, seed, mnt)
}
