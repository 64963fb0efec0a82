package kv_test

import (
	"bytes"
	"fmt"
	"os/exec"
	"strings"
	"syscall"
	"testing"
)

// mountTmpfs mounts a tmpfs of size bytes, or skips loudly when this
// process may not mount.
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

func errorsIsNoSpace(err error) bool {
	return strings.Contains(strings.ToLower(err.Error()), syscall.ENOSPC.Error())
}
