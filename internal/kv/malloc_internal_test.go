//go:build cgo && !kstate_nocgo && linux

package kv

import (
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// A process that opens a RocksDB store keeps at most mallocArenas malloc
// arenas, however many threads allocate at once, unless the operator set
// MALLOC_ARENA_MAX: then glibc's own limit applies. Each case runs in a
// child process, because the limit is per process and arenas created
// before it stay.
func TestMallocArenasLimited(t *testing.T) {
	const threads = 12
	for _, c := range []struct {
		name string
		env  string // MALLOC_ARENA_MAX, "" for unset
		ok   func(heaps int) bool
		want string
	}{
		{"default", "", func(h int) bool { return h >= 1 && h <= mallocArenas }, fmt.Sprintf("at most %d", mallocArenas)},
		// The operator's value wins: 8 arenas let the 12 threads spread
		// over more than kstate's 2 (this case also shows the child's
		// threads do make glibc create arenas, so the first can fail).
		{"operator's MALLOC_ARENA_MAX=8", "8", func(h int) bool { return h > mallocArenas && h <= 8 }, "3 to 8"},
	} {
		t.Run(c.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run", "^TestMallocArenasChild$", "-test.v")
			cmd.Env = append(withoutEnv(os.Environ(), "MALLOC_ARENA_MAX"),
				"KSTATE_KV_ARENAS_CHILD=1", fmt.Sprintf("KSTATE_KV_ARENAS_THREADS=%d", threads))
			if c.env != "" {
				cmd.Env = append(cmd.Env, "MALLOC_ARENA_MAX="+c.env)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Fatalf("child: %v\n%s", err, out)
			}
			m := regexp.MustCompile(`heaps=(-?\d+)`).FindSubmatch(out)
			if m == nil {
				t.Fatalf("child printed no heaps=:\n%s", out)
			}
			heaps, _ := strconv.Atoi(string(m[1]))
			if heaps < 0 {
				t.Skip("not glibc: malloc_info is not available")
			}
			if !c.ok(heaps) {
				t.Errorf("%d threads allocating at once after a RocksDB open: %d malloc arenas, want %s", threads, heaps, c.want)
			}
		})
	}
}

func withoutEnv(env []string, name string) []string {
	var out []string
	for _, e := range env {
		if !strings.HasPrefix(e, name+"=") {
			out = append(out, e)
		}
	}
	return out
}

// TestMallocArenasChild is TestMallocArenasLimited's child process.
func TestMallocArenasChild(t *testing.T) {
	if os.Getenv("KSTATE_KV_ARENAS_CHILD") != "1" {
		t.Skip("run by TestMallocArenasLimited")
	}
	threads, err := strconv.Atoi(os.Getenv("KSTATE_KV_ARENAS_THREADS"))
	if err != nil {
		t.Fatal(err)
	}
	s, err := OpenRocksDB(t.TempDir(), RocksOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	fmt.Printf("heaps=%d\n", mallocHeaps(threads))
}
