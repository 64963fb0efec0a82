//go:build cgo && !kstate_nocgo

package kv_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kv"
)

// RocksDB's own info LOG file is off by default (its logger aborts the
// process on a full disk) and on with InfoLogFile. The test also proves that
// the logger replacement reaches the C options: if grocksdb's layout changed,
// the LOG file would reappear.
func TestRocksDBNoInfoLogFile(t *testing.T) {
	for _, on := range []bool{false, true} {
		dir := t.TempDir()
		s, err := kv.OpenRocksDB(dir, kv.RocksOptions{InfoLogFile: on})
		if err != nil {
			t.Fatal(err)
		}
		b := &kv.Batch{}
		b.Put([]byte("k"), []byte("v"))
		if err := s.Write(b, kv.WriteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := s.Close(); err != nil {
			t.Fatal(err)
		}
		_, err = os.Stat(filepath.Join(dir, "LOG"))
		if got := err == nil; got != on {
			t.Errorf("InfoLogFile=%v: LOG file exists=%v (stat: %v)", on, got, err)
		}
	}
}

// A full disk is an error from Write, never an abort of the process, with
// every write mode the shard uses (WAL, sync WAL, WAL-less restore writes
// followed by logged ones, which flush first). Once space returns the store
// reopens with every acknowledged write.
//
// Before the info LOG was replaced, RocksDB 7.8 aborted here with
// "writable_file_writer.h:312 ... Assertion `sync_without_flush_called_'
// failed" from a background flush logging its ENOSPC error; running with
// KSTATE_DISKFULL_INFOLOG=1 turns the LOG file back on and shows the abort.
func TestRocksDBDiskFull(t *testing.T) {
	for _, mode := range []string{"wal", "sync", "mixed"} {
		t.Run(mode, func(t *testing.T) {
			if os.Getenv("KSTATE_DISKFULL_CHILD") == "" {
				// Run in a child process: an abort must fail this test, not
				// kill the whole test binary.
				mnt := mountTmpfs(t, 4<<20)
				cmd := exec.Command(os.Args[0], "-test.run", "^TestRocksDBDiskFull$/^"+mode+"$", "-test.v")
				cmd.Env = append(os.Environ(), "KSTATE_DISKFULL_CHILD="+mnt)
				out, err := cmd.CombinedOutput()
				if err != nil || !strings.Contains(string(out), "--- PASS: TestRocksDBDiskFull/"+mode) {
					t.Fatalf("child: %v\n%s", err, out)
				}
				return
			}
			diskFull(t, os.Getenv("KSTATE_DISKFULL_CHILD"), mode)
		})
	}
}

func diskFull(t *testing.T, mnt, mode string) {
	dir := filepath.Join(mnt, mode)
	s, err := kv.OpenRocksDB(dir, kv.RocksOptions{InfoLogFile: os.Getenv("KSTATE_DISKFULL_INFOLOG") != "", WriteBufferSize: 1 << 20})
	if err != nil {
		t.Fatal(err)
	}
	val := bytes.Repeat([]byte("v"), 4096)
	acked := 0
	var werr error
	for i := 0; i < 10_000 && werr == nil; i++ {
		b := &kv.Batch{}
		for j := 0; j < 10; j++ {
			b.Put(fmt.Appendf(nil, "k%06d-%d", i, j), val)
		}
		o := kv.WriteOptions{Sync: mode == "sync", DisableWAL: mode == "mixed" && i%2 == 0}
		if werr = s.Write(b, o); werr == nil {
			acked = i + 1
		}
	}
	if werr == nil {
		t.Fatal("10,000 writes of 32 KiB into a 4 MiB tmpfs all succeeded")
	}
	if !errorsIsNoSpace(werr) {
		t.Errorf("write error %q does not say the disk is full", werr)
	}
	t.Logf("%d writes acknowledged, then: %v", acked, werr)
	// Further writes keep failing cleanly, without calling RocksDB after
	// an I/O error (its log writer once aborted here: rocksdb.go, failed).
	b := &kv.Batch{}
	b.Put([]byte("again"), val)
	if err := s.Write(b, kv.WriteOptions{}); err == nil {
		t.Log("a write after the failure succeeded (RocksDB recovered some space)")
	} else if !kv.IsStoreFailure(err) {
		t.Errorf("the write after the failure: %v; want a store failure", err)
	}
	_ = s.Close() // may fail (flush on close); must not abort

	// Space returns: the mount grows.
	if out, err := exec.Command("mount", "-o", "remount,size=64m", mnt).CombinedOutput(); err != nil {
		t.Fatalf("remount bigger: %v: %s", err, out)
	}
	s, err = kv.OpenRocksDB(dir, kv.RocksOptions{})
	if err != nil {
		t.Fatalf("reopen after space returned: %v", err)
	}
	defer s.Close()
	// Every acknowledged logged write is there (WAL-less ones may be lost on
	// a failure, which is why the changelog offset is written logged).
	for i := 0; i < acked; i++ {
		if mode == "mixed" && i%2 == 0 {
			continue
		}
		if _, ok, err := s.Get(fmt.Appendf(nil, "k%06d-0", i)); err != nil || !ok {
			t.Fatalf("acknowledged write %d missing after reopen (ok=%v, err=%v)", i, ok, err)
		}
	}
	b = &kv.Batch{}
	b.Put([]byte("after"), val)
	if err := s.Write(b, kv.WriteOptions{Sync: true}); err != nil {
		t.Fatalf("write after space returned: %v", err)
	}
}
