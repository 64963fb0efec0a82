package kv_test

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/kv/kvtest"
)

func pebbleOpener(o kv.PebbleOptions) func(t *testing.T, dir string) kv.Store {
	return func(t *testing.T, dir string) kv.Store {
		t.Helper()
		s, err := kv.OpenPebble(dir, o)
		if err != nil {
			t.Fatalf("OpenPebble(%s): %v", dir, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

func TestPebbleConformance(t *testing.T) {
	kvtest.RunConformance(t, pebbleOpener(kv.PebbleOptions{}))
}

// With a 64 KiB memtable the suite runs mostly against flushed tables.
func TestPebbleConformanceSmallMemtable(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	kvtest.RunConformance(t, pebbleOpener(kv.PebbleOptions{WriteBufferSize: 64 << 10, BlockCacheSize: 1 << 20}))
}

func TestPebbleConformanceSharedMemory(t *testing.T) {
	m, err := kv.NewSharedMemory(8 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close) // after every store's Cleanup (LIFO)
	kvtest.RunConformance(t, pebbleOpener(kv.PebbleOptions{Memory: m}))
}

func TestPebbleOptions(t *testing.T) {
	for _, o := range []kv.PebbleOptions{{BlockCacheSize: -1}, {WriteBufferSize: -1}} {
		if _, err := kv.OpenPebble(t.TempDir(), o); !errors.Is(err, kv.ErrInvalidOptions) {
			t.Errorf("OpenPebble(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	missing := filepath.Join(t.TempDir(), "missing")
	if _, err := kv.OpenPebble(missing, kv.PebbleOptions{ErrorIfMissing: true}); err == nil {
		t.Fatal("ErrorIfMissing opened a missing database")
	}
	if _, err := os.Stat(missing); err == nil {
		t.Fatal("ErrorIfMissing created the directory")
	}
	s := pebbleOpener(kv.PebbleOptions{})(t, t.TempDir())
	var b kv.Batch
	b.Put([]byte("k"), []byte("v"))
	if err := s.Write(&b, kv.WriteOptions{Sync: true, DisableWAL: true}); !errors.Is(err, kv.ErrInvalidOptions) {
		t.Fatalf("Sync+DisableWAL: %v, want ErrInvalidOptions", err)
	}
}

// ReadOnly opens a store another handle keeps open for writing (the state
// reader beside a running application), sees what was written before the
// open, refuses writes, and never creates a missing database.
func TestPebbleReadOnly(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "db")
	rw := pebbleOpener(kv.PebbleOptions{})(t, dir)
	var b kv.Batch
	b.Put([]byte("a"), []byte("1"))
	// Not Sync: the store syncs every logged write, so that a reader sees it.
	if err := rw.Write(&b, kv.WriteOptions{}); err != nil {
		t.Fatal(err)
	}
	ro, err := kv.OpenPebble(dir, kv.PebbleOptions{ReadOnly: true})
	if err != nil {
		t.Fatalf("read-only open beside a writer: %v", err)
	}
	defer ro.Close()
	if v, ok, err := ro.Get([]byte("a")); err != nil || !ok || string(v) != "1" {
		t.Fatalf("Get: %q %v %v", v, ok, err)
	}
	var w kv.Batch
	w.Put([]byte("b"), []byte("2"))
	if err := ro.Write(&w, kv.WriteOptions{}); err == nil {
		t.Fatal("a read-only store accepted a write")
	}
	if _, err := kv.OpenPebble(filepath.Join(t.TempDir(), "missing"), kv.PebbleOptions{ReadOnly: true}); err == nil {
		t.Fatal("read-only open of a missing database succeeded")
	}
	// A second read-write open of the same directory is refused (lock).
	if s, err := kv.OpenPebble(dir, kv.PebbleOptions{}); err == nil {
		s.Close()
		t.Fatal("a second read-write open beside a writer succeeded")
	}
}

// The crash test of the RocksDB backend, against Pebble: a child process
// writes a "WAL-less" (restore) batch, then a logged one, and exits without
// Close. Whatever survives must be a prefix: the later write never without
// the earlier one. A third, synced write must survive.
func TestPebbleUnloggedThenLoggedSurvivesCrash(t *testing.T) {
	const env = "KSTATE_KV_PEBBLE_CRASH_DIR"
	if dir := os.Getenv(env); dir != "" {
		pebbleCrashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleUnloggedThenLoggedSurvivesCrash$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s := pebbleOpener(kv.PebbleOptions{})(t, dir)
	for _, k := range []string{"restored", "live", "synced"} {
		if _, ok, err := s.Get([]byte(k)); err != nil || !ok {
			t.Fatalf("%s lost in a crash after a synced write: ok=%v err=%v", k, ok, err)
		}
	}
}

func pebbleCrashChild(dir string) {
	s, err := kv.OpenPebble(dir, kv.PebbleOptions{})
	if err != nil {
		os.Exit(3)
	}
	for i, w := range []struct {
		k string
		o kv.WriteOptions
	}{{"restored", kv.WriteOptions{DisableWAL: true}}, {"live", kv.WriteOptions{}}, {"synced", kv.WriteOptions{Sync: true}}} {
		var b kv.Batch
		b.Put([]byte(w.k), []byte("v"))
		if s.Write(&b, w.o) != nil {
			os.Exit(4 + i)
		}
	}
	os.Exit(0) // no Close: a crash as far as Pebble is concerned
}

// A process killed (SIGKILL) in the middle of a stream of synced batches
// leaves, after reopen, every acknowledged batch whole and no torn batch:
// each batch writes the same sequence number under 20 keys.
func TestPebbleKillMidWrites(t *testing.T) {
	const env = "KSTATE_KV_PEBBLE_KILL_DIR"
	if dir := os.Getenv(env); dir != "" {
		s, err := kv.OpenPebble(dir, kv.PebbleOptions{WriteBufferSize: 256 << 10})
		if err != nil {
			os.Exit(3)
		}
		val := bytes.Repeat([]byte("x"), 512)
		for i := 0; ; i++ {
			var b kv.Batch
			for j := 0; j < 20; j++ {
				b.Put(fmt.Appendf(nil, "k%02d", j), fmt.Appendf(append([]byte{}, val...), "%08d", i))
			}
			if err := s.Write(&b, kv.WriteOptions{Sync: i%3 == 0, DisableWAL: i%3 == 1}); err != nil {
				os.Exit(4)
			}
			if i%3 == 0 {
				fmt.Printf("acked %d\n", i) // synced: must survive
			}
		}
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPebbleKillMidWrites$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lastAcked := -1
	sc := bufio.NewScanner(stdout)
	for sc.Scan() {
		fmt.Sscanf(sc.Text(), "acked %d", &lastAcked)
		if lastAcked >= 300 {
			break
		}
	}
	_ = cmd.Process.Kill() // SIGKILL, mid-stream
	_ = cmd.Wait()
	if lastAcked < 300 {
		t.Fatalf("child stopped after synced batch %d", lastAcked)
	}
	s := pebbleOpener(kv.PebbleOptions{})(t, dir)
	var seq string
	for j := 0; j < 20; j++ {
		v, ok, err := s.Get(fmt.Appendf(nil, "k%02d", j))
		if err != nil || !ok {
			t.Fatalf("k%02d missing after kill: ok=%v err=%v", j, ok, err)
		}
		got := string(v[len(v)-8:])
		if j == 0 {
			seq = got
		} else if got != seq {
			t.Fatalf("torn batch after kill: k00 at %s, k%02d at %s", seq, j, got)
		}
	}
	var n int
	fmt.Sscanf(seq, "%d", &n)
	if n < lastAcked {
		t.Fatalf("acknowledged synced batch %d lost: store at %d", lastAcked, n)
	}
	t.Logf("killed after synced batch %d; store at batch %d, whole", lastAcked, n)
}

// A full disk is an error from Write, never a crash or a hang of the
// process, with every write mode the shard uses. Pebble stalls writers while
// flushes fail, and treats a failed WAL write as fatal: the store turns both
// into errors. The filling runs in a child process (which then exits, as the
// application would); once space returns the store reopens with every write
// acknowledged before the last synced one.
func TestPebbleDiskFull(t *testing.T) {
	for _, mode := range []string{"wal", "sync", "mixed"} {
		t.Run(mode, func(t *testing.T) {
			if mnt := os.Getenv("KSTATE_DISKFULL_CHILD"); mnt != "" {
				pebbleFillDisk(t, mnt, mode)
				return
			}
			mnt := mountTmpfs(t, 4<<20)
			cmd := exec.Command(os.Args[0], "-test.run", "^TestPebbleDiskFull$/^"+mode+"$", "-test.v")
			cmd.Env = append(os.Environ(), "KSTATE_DISKFULL_CHILD="+mnt)
			out, err := cmd.CombinedOutput()
			if err != nil || !strings.Contains(string(out), "--- PASS: TestPebbleDiskFull/"+mode) {
				t.Fatalf("child: %v\n%s", err, out)
			}
			lastSynced := -2
			for _, l := range strings.Split(string(out), "\n") {
				if _, err := fmt.Sscanf(strings.TrimSpace(l), "LASTSYNCED %d", &lastSynced); err == nil {
					break
				}
			}
			if lastSynced == -2 {
				t.Fatalf("child did not report its last synced write:\n%s", out)
			}
			if out, err := exec.Command("mount", "-o", "remount,size=64m", mnt).CombinedOutput(); err != nil {
				t.Fatalf("remount bigger: %v: %s", err, out)
			}
			s, err := kv.OpenPebble(filepath.Join(mnt, mode), kv.PebbleOptions{})
			if err != nil {
				t.Fatalf("reopen after space returned: %v", err)
			}
			defer s.Close()
			for i := 0; i <= lastSynced; i++ {
				if _, ok, err := s.Get(fmt.Appendf(nil, "k%06d-0", i)); err != nil || !ok {
					t.Fatalf("write %d (before synced write %d) missing after reopen (ok=%v, err=%v)", i, lastSynced, ok, err)
				}
			}
			b := &kv.Batch{}
			b.Put([]byte("after"), []byte("v"))
			if err := s.Write(b, kv.WriteOptions{Sync: true}); err != nil {
				t.Fatalf("write after space returned: %v", err)
			}
		})
	}
}

func pebbleFillDisk(t *testing.T, mnt, mode string) {
	s, err := kv.OpenPebble(filepath.Join(mnt, mode), kv.PebbleOptions{WriteBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 4096)
	acked, lastSynced := 0, -1
	var werr error
	for i := 0; i < 10_000 && werr == nil; i++ {
		b := &kv.Batch{}
		for j := 0; j < 10; j++ {
			b.Put(fmt.Appendf(nil, "k%06d-%d", i, j), val)
		}
		o := kv.WriteOptions{Sync: mode != "wal" && i%2 == 1, DisableWAL: mode == "mixed" && i%2 == 0}
		if werr = s.Write(b, o); werr == nil {
			acked = i + 1
			if o.Sync {
				lastSynced = i
			}
		}
	}
	if werr == nil {
		t.Fatal("10,000 writes of 40 KiB into a 4 MiB tmpfs all succeeded")
	}
	if !errorsIsNoSpace(werr) {
		t.Errorf("write error %q does not say the disk is full", werr)
	}
	t.Logf("%d writes acknowledged, then: %v", acked, werr)
	b := &kv.Batch{}
	b.Put([]byte("again"), val)
	if err := s.Write(b, kv.WriteOptions{}); err == nil {
		t.Log("a write after the failure succeeded")
	}
	t.Logf("close: %v", s.Close()) // may fail or give up; must not hang or crash
	fmt.Printf("LASTSYNCED %d\n", lastSynced)
}

// Close releases every file descriptor, including iterators left open.
func TestPebbleCloseReleasesFiles(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	dir := t.TempDir()
	open := func() kv.Store {
		s, err := kv.OpenPebble(dir, kv.PebbleOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	before := fds()
	for i := range 20 {
		s := open()
		var b kv.Batch
		b.Put([]byte{byte(i)}, []byte("v"))
		if err := s.Write(&b, kv.WriteOptions{DisableWAL: i%2 == 0}); err != nil {
			t.Fatal(err)
		}
		it := s.NewIter([]byte{0}, []byte{255}) // left open on purpose: Close must free it
		it.First()
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if after := fds(); after > before {
		t.Fatalf("open fds grew from %d to %d over 20 open/close cycles", before, after)
	}
}

// TestPebbleBlockCacheBesideMemtables checks that a Pebble store whose
// memtables have grown to full size still caches blocks: Pebble reserves
// its memtables from the block cache, and a cache of BlockCacheSize alone
// (smaller than two memtables) then held nothing, every read of the same
// keys going to the files again.
func TestPebbleBlockCacheBesideMemtables(t *testing.T) {
	const memtable = 4 << 20
	s := pebbleOpener(kv.PebbleOptions{BlockCacheSize: 2 * memtable, WriteBufferSize: memtable})(t, t.TempDir())
	const keys = 200_000 // 40 MB of values: the memtables reach full size
	fillForCache(t, s, 3, keys)
	checkCachesBlocks(t, s, 3, keys)
}

// TestPebbleSharedMemoryCachesBlocks checks the same for stores on a shared
// budget: with the default memtable size, two stores' memtables took the
// whole 64 MiB budget and it held no block (sharedPebbleMemtable).
func TestPebbleSharedMemoryCachesBlocks(t *testing.T) {
	m, err := kv.NewSharedMemory(64 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(m.Close) // after the stores' Cleanup (LIFO)
	a := pebbleOpener(kv.PebbleOptions{Memory: m})(t, t.TempDir())
	b := pebbleOpener(kv.PebbleOptions{Memory: m})(t, t.TempDir())
	const keys = 200_000 // 40 MB each: the default memtables grow to full size
	fillForCache(t, a, 5, keys)
	fillForCache(t, b, 6, keys)
	checkCachesBlocks(t, b, 6, keys)
	checkCachesBlocks(t, a, 5, keys)
}

// fillForCache writes keys keys of 200 random bytes to s.
func fillForCache(t *testing.T, s kv.Store, seed uint64, keys int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed+1))
	var b kv.Batch
	for i := range keys {
		v := make([]byte, 200)
		for j := range v {
			v[j] = byte(rng.Uint32())
		}
		b.Put(largeKey(i), v)
		if b.Len() == 1000 {
			if err := s.Write(&b, kv.WriteOptions{}); err != nil {
				t.Fatal(err)
			}
			b.Reset()
		}
	}
}

// checkCachesBlocks reads 500 of the keys fillForCache wrote twice: the
// second read must be answered from the block cache.
func checkCachesBlocks(t *testing.T, s kv.Store, seed uint64, keys int) {
	t.Helper()
	rng := rand.New(rand.NewPCG(seed, seed))
	read := make([][]byte, 500) // about 2 MiB of data blocks
	for i := range read {
		read[i] = largeKey(rng.IntN(keys))
	}
	for pass := range 2 {
		_, hits0, misses0, err := kv.PebbleBlockCacheForTest(s)
		if err != nil {
			t.Fatal(err)
		}
		for _, k := range read {
			if _, ok, err := s.Get(k); err != nil || !ok {
				t.Fatalf("Get(%s): %v, %v", k, ok, err)
			}
		}
		size, hits, misses, _ := kv.PebbleBlockCacheForTest(s)
		hits, misses = hits-hits0, misses-misses0
		t.Logf("pass %d: %d hits, %d misses, %d bytes cached", pass, hits, misses, size)
		if pass == 1 && (hits == 0 || hits < 9*misses) { // none: the reads did not reach a table
			t.Fatalf("the second read of the same %d keys hit the block cache %d times and missed %d (%d bytes cached): the memtables' reservation left no room for blocks", len(read), hits, misses, size)
		}
	}
}

// Pebble's tables are written uncompressed while the values written do
// not compress, and with Snappy again once they do; every value stays
// readable.
func TestPebbleCompressionFollowsValues(t *testing.T) {
	s := pebbleOpener(kv.PebbleOptions{})(t, t.TempDir())
	rng := rand.New(rand.NewPCG(5, 6))
	write := func(from int, compressible bool) string {
		t.Helper()
		writeCompressionPhase(t, s, rng, from, compressible)
		c, err := kv.PebbleFlushCompressionForTest(s)
		if err != nil {
			t.Fatal(err)
		}
		checkCompressionValues(t, s, 0, from+1, from+199_999)
		return c
	}
	if c := write(0, false); c != "NoCompression" {
		t.Fatalf("after random values: the newest table's compression is %s, want NoCompression", c)
	}
	if c := write(200_000, true); c != "Snappy" {
		t.Fatalf("after compressible values: the newest table's compression is %s, want Snappy", c)
	}
}
