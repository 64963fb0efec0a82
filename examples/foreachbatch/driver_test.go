package main

import (
	"context"
	"database/sql"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
	"github.com/kstate/kstate/kstatetest"
)

// The application on kstatetest's driver (the coordinator, its planned
// sink batches and the in-memory Kafka), writing to a real SQLite
// database; then the same with the sink failing, and with a crash after
// the sink wrote: the table is exact, and a batch id written twice had the
// same rows.

func newDriver(t *testing.T) (*kstatetest.Driver[string, string, string], *sqlsink.Sink) {
	t.Helper()
	db, err := sql.Open("sqlite", "file:"+filepath.Join(t.TempDir(), "counts.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	sink, err := sqlsink.Open(context.Background(), db, sqlsink.SQLite, "counts", true)
	if err != nil {
		t.Fatal(err)
	}
	return kstatetest.New(t, topology("words", sink), kstatetest.ApplicationID("foreachbatch"), kstatetest.Partitions(3)), sink
}

func words(d *kstatetest.Driver[string, string, string], ws string) {
	for w := range strings.FieldsSeq(ws) {
		d.Input(w, w)
	}
}

func table(t *testing.T, s *sqlsink.Sink) string {
	t.Helper()
	tb, err := s.Table(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return format(tb)
}

func TestForeachBatchDriver(t *testing.T) {
	d, sink := newDriver(t)
	words(d, "a a a b b")
	d.MustRunBatch()
	if got := table(t, sink); got != "a=3 b=2" {
		t.Fatalf("table %s", got)
	}
	words(d, "a c")
	d.MustRunBatch()
	d.Restart(kstatetest.KeepLocalState())
	words(d, "b")
	d.MustRunBatch()
	if got := table(t, sink); got != "a=4 b=3 c=1" {
		t.Fatalf("table %s, want a=4 b=3 c=1", got)
	}
}

func TestForeachBatchSinkFailures(t *testing.T) {
	d, sink := newDriver(t)
	words(d, "a a a b b")
	d.MustRunBatch()

	// The sink fails: nothing is committed, the batch is redone.
	d.FailNextSink()
	words(d, "a c")
	var se *kstate.SinkError
	if err := d.RunBatch(); !errors.As(err, &se) {
		t.Fatalf("RunBatch with a failing sink = %v, want a *kstate.SinkError", err)
	}
	d.MustRunBatch()
	if got := table(t, sink); got != "a=4 b=2 c=1" {
		t.Fatalf("table %s after the redone batch", got)
	}

	// A crash after the sink wrote and before the batch's transaction:
	// the restarted application hands the sink the same batch again (same
	// id and rows), which the sink's high-water mark skips.
	d.Crash(kstatetest.AfterSink)
	words(d, "b c c")
	if err := d.RunBatch(); !errors.Is(err, kstatetest.ErrCrashed) {
		t.Fatalf("RunBatch with a crash = %v", err)
	}
	d.Restart(kstatetest.KeepLocalState())
	d.MustRunBatch()
	if got := table(t, sink); got != "a=4 b=3 c=3" {
		t.Fatalf("table %s, want a=4 b=3 c=3", got)
	}
	calls, err := sink.Calls(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	retries, err := sqlsink.CheckCalls(calls)
	if err != nil {
		t.Fatal(err)
	}
	if retries == 0 {
		t.Fatalf("no batch was written twice: the crash after the sink did not make the restart re-execute it (calls %v)", calls)
	}
}
