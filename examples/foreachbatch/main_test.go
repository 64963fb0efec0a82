package main

import (
	"bytes"
	"context"
	"database/sql"
	"path/filepath"
	"testing"
	"time"

	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
)

func TestForeachBatch(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	var out bytes.Buffer
	dbPath := filepath.Join(t.TempDir(), "counts.db")
	if err := run(ctx, nil, t.TempDir(), dbPath, &out); err != nil {
		t.Fatalf("run: %v\noutput so far:\n%s", err, out.String())
	}
	if got := out.String(); got != want {
		t.Fatalf("output:\n%s\nwant:\n%s", got, want)
	}
	// The database file holds the result and one high-water mark per
	// partition that got rows.
	db, err := sql.Open("sqlite", "file:"+dbPath)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	s, err := sqlsink.Open(ctx, db, sqlsink.SQLite, "counts", false)
	if err != nil {
		t.Fatal(err)
	}
	table, err := s.Table(ctx)
	if err != nil || format(table) != "a=4 b=3 c=1" {
		t.Fatalf("table %v, %v", table, err)
	}
}

const want = `in   a a a b b
db   a=3 b=2
in   a c
db   a=4 b=2 c=1
(application restarted)
in   b
db   a=4 b=3 c=1
`
