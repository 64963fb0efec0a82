//go:build cgo && !kstate_nocgo

package kv_test

import (
	"errors"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/kv/kvtest"
)

func rocksOpener(o kv.RocksOptions) func(t *testing.T, dir string) kv.Store {
	return func(t *testing.T, dir string) kv.Store {
		t.Helper()
		s, err := kv.OpenRocksDB(dir, o)
		if err != nil {
			t.Fatalf("OpenRocksDB(%s): %v", dir, err)
		}
		t.Cleanup(func() { _ = s.Close() })
		return s
	}
}

func TestRocksDBConformance(t *testing.T) {
	kvtest.RunConformance(t, rocksOpener(kv.RocksOptions{}))
}

// With a 64 KiB memtable the same suite runs mostly against SST files,
// flushes and compactions rather than the memtable.
func TestRocksDBConformanceSmallMemtable(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	kvtest.RunConformance(t, rocksOpener(kv.RocksOptions{
		WriteBufferSize: 64 << 10, BlockCacheSize: 1 << 20, Compression: kv.CompressionNone,
	}))
}

func TestRocksOptions(t *testing.T) {
	for _, o := range []kv.RocksOptions{
		{BlockCacheSize: -1}, {WriteBufferSize: -1}, {MaxBackgroundJobs: -1}, {KeepLogFiles: -1},
		{Compression: kv.CompressionZSTD + 1},
	} {
		if _, err := kv.OpenRocksDB(t.TempDir(), o); !errors.Is(err, kv.ErrInvalidOptions) {
			t.Errorf("OpenRocksDB(%+v) = %v, want ErrInvalidOptions", o, err)
		}
	}
	for _, c := range []kv.Compression{kv.CompressionDefault, kv.CompressionNone, kv.CompressionSnappy, kv.CompressionLZ4, kv.CompressionZSTD} {
		s, err := kv.OpenRocksDB(t.TempDir(), kv.RocksOptions{Compression: c, BloomBitsPerKey: -1})
		if err != nil {
			t.Fatalf("compression %v: %v", c, err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := kv.OpenRocksDB(filepath.Join(t.TempDir(), "missing"), kv.RocksOptions{ErrorIfMissing: true}); err == nil {
		t.Fatal("ErrorIfMissing opened a missing database")
	}
	s := rocksOpener(kv.RocksOptions{})(t, t.TempDir())
	var b kv.Batch
	b.Put([]byte("k"), []byte("v"))
	if err := s.Write(&b, kv.WriteOptions{Sync: true, DisableWAL: true}); !errors.Is(err, kv.ErrInvalidOptions) {
		t.Fatalf("Sync+DisableWAL: %v, want ErrInvalidOptions", err)
	}
}

// A restore writes WAL-less batches, then processing writes logged ones. If
// the process dies before the memtable is flushed, RocksDB replays the
// logged write but not the WAL-less one before it: the shard would hold a
// later offset without the restored state. The store flushes at that
// transition; this test crashes a child process (exit without Close) to
// prove the restored data survives whenever the later write does.
func TestRocksUnloggedThenLoggedSurvivesCrash(t *testing.T) {
	const env = "KSTATE_KV_CRASH_DIR"
	if dir := os.Getenv(env); dir != "" {
		crashChild(dir)
		return
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestRocksUnloggedThenLoggedSurvivesCrash$")
	cmd.Env = append(os.Environ(), env+"="+dir)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	s := rocksOpener(kv.RocksOptions{})(t, dir)
	if _, ok, err := s.Get([]byte("live")); err != nil || !ok {
		t.Fatalf("logged write lost: ok=%v err=%v", ok, err)
	}
	if v, ok, err := s.Get([]byte("restored")); err != nil || !ok || string(v) != "r" {
		t.Fatalf("WAL-less write before a logged one lost in a crash: %q ok=%v err=%v", v, ok, err)
	}
}

func crashChild(dir string) {
	s, err := kv.OpenRocksDB(dir, kv.RocksOptions{})
	if err != nil {
		os.Exit(3)
	}
	var b kv.Batch
	b.Put([]byte("restored"), []byte("r"))
	if s.Write(&b, kv.WriteOptions{DisableWAL: true}) != nil {
		os.Exit(4)
	}
	b.Reset()
	b.Put([]byte("live"), []byte("l"))
	if s.Write(&b, kv.WriteOptions{}) != nil {
		os.Exit(5)
	}
	os.Exit(0) // no Close: a crash as far as RocksDB is concerned
}

// Close must release every file descriptor (DB, WAL, LOG, SSTs); a leak per
// open/close would exhaust a process that rebalances often.
func TestRocksCloseReleasesFiles(t *testing.T) {
	fds := func() int {
		ents, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Skip("no /proc/self/fd")
		}
		return len(ents)
	}
	dir := t.TempDir()
	open := func() kv.Store {
		s, err := kv.OpenRocksDB(dir, kv.RocksOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	s := open() // the first open starts RocksDB's process-wide threads and files
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

// rocksCompressionOption returns the compression in the newest OPTIONS
// file of the store at dir: the option as RocksDB applies it.
func rocksCompressionOption(t *testing.T, dir string) string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "OPTIONS-*"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no OPTIONS file in %s: %v", dir, err)
	}
	slices.Sort(files) // OPTIONS-000007: zero-padded numbers
	b, err := os.ReadFile(files[len(files)-1])
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(b)) {
		if v, ok := strings.CutPrefix(strings.TrimSpace(line), "compression="); ok {
			return v
		}
	}
	t.Fatalf("%s has no compression option", files[len(files)-1])
	return ""
}

// The default compression is turned off while the values written do not
// compress, and on again once they do, and every value stays readable; a
// compression chosen explicitly is kept.
func TestRocksDBCompressionFollowsValues(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	check := func(t *testing.T, s kv.Store, n int) {
		t.Helper()
		if err := kv.FlushForTest(s); err != nil {
			t.Fatal(err)
		}
		checkCompressionValues(t, s, 0, n/3, n-1)
	}
	t.Run("default", func(t *testing.T) {
		dir := t.TempDir()
		s := rocksOpener(kv.RocksOptions{})(t, dir)
		on := rocksCompressionOption(t, dir)
		if on == "kNoCompression" {
			t.Fatalf("opened with %s", on)
		}
		writeCompressionPhase(t, s, rng, 0, false)
		check(t, s, 200_000)
		if c := rocksCompressionOption(t, dir); c != "kNoCompression" {
			t.Fatalf("after random values: compression %s, want kNoCompression", c)
		}
		writeCompressionPhase(t, s, rng, 200_000, true)
		check(t, s, 400_000)
		if c := rocksCompressionOption(t, dir); c != on {
			t.Fatalf("after compressible values: compression %s, want %s", c, on)
		}
	})
	t.Run("explicit", func(t *testing.T) {
		dir := t.TempDir()
		s := rocksOpener(kv.RocksOptions{Compression: kv.CompressionSnappy})(t, dir)
		writeCompressionPhase(t, s, rng, 0, false)
		check(t, s, 200_000)
		if c := rocksCompressionOption(t, dir); c != "kSnappyCompression" {
			t.Fatalf("explicit Snappy after random values: compression %s", c)
		}
	})
}
