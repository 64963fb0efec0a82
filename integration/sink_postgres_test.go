package integration

import (
	"context"
	"database/sql"
	"errors"
	"maps"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the "pgx" database/sql driver

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/foreachbatch/sqlsink"
	"github.com/kstate/kstate/internal/pgtest"
	"github.com/kstate/kstate/internal/testprocs"
)

// failOnce fails its n-th call (from 1) after passing it to the sink: the
// rows reached PostgreSQL, then the batch fails — the worst case for the
// retry, which must carry the same id and rows.
type failOnce struct {
	s     *sqlsink.Sink
	n     int64
	calls atomic.Int64
}

var errInjected = errors.New("injected failure after the database commit")

func (f *failOnce) WriteBatch(ctx context.Context, b kstate.SinkBatch[string, string]) error {
	if err := f.s.WriteBatch(ctx, b); err != nil {
		return err
	}
	if f.calls.Add(1) == f.n {
		return errInjected
	}
	return nil
}

// TestSinkPostgres runs the counter with a foreachBatch sink upserting into
// a real PostgreSQL (Debian's package, started by internal/pgtest) through
// pgx, on the real broker: the table equals the model; a sink failure after
// the database commit stops Run with a SinkError, and the restart retries
// the batch with the same id and rows, which the high-water mark skips.
func TestSinkPostgres(t *testing.T) {
	t.Parallel()
	pg := pgtest.Start(t)
	db, err := sql.Open("pgx", pg.DSN)
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ctx := context.Background()
	sink, err := sqlsink.Open(ctx, db, sqlsink.Postgres, "counts", true)
	if err != nil {
		t.Fatal(err)
	}
	e := newSpecEnv(t, 3)
	cfg := e.config(t, testprocs.NewCounter)
	cfg.Output.Topic, cfg.Output.Serde = "", nil
	model := map[string]string{}
	counts := map[string]int{}
	produce := func(keys ...string) {
		var kvs []string
		for _, k := range keys {
			counts[k]++
			model[k] = strconv.Itoa(counts[k])
			kvs = append(kvs, k+"=x")
		}
		testprocs.Produce(t, e.brokers, e.in, kvs...)
	}
	waitTable := func(what string) {
		t.Helper()
		testprocs.Eventually(t, time.Minute, what, func() bool {
			got, err := sink.Table(ctx)
			return err == nil && maps.Equal(got, model)
		})
	}

	// 1. The sink fails on its second call, after writing to PostgreSQL.
	f := &failOnce{s: sink, n: 2}
	cfg.Output.Sinks = []kstate.Sink[string, string]{f}
	app := newSpecApp(t, cfg)
	_, done := testprocs.StartWatch(t, app)
	produce("a", "b", "a")
	waitTable("first batch in PostgreSQL")
	produce("a", "c")
	var runErr error
	select {
	case runErr = <-done:
	case <-time.After(time.Minute):
		t.Fatal("Run did not stop on the sink error")
	}
	var se *kstate.SinkError
	if !errors.As(runErr, &se) || !errors.Is(runErr, errInjected) {
		t.Fatalf("Run: %v, want a SinkError", runErr)
	}
	t.Logf("Run stopped: %v", runErr)

	// 2. The restart retries that batch (skipped by the high-water mark:
	// its rows are in already) and goes on.
	cfg.Output.Sinks = []kstate.Sink[string, string]{sink}
	app2 := newSpecApp(t, cfg)
	stop := testprocs.Start(t, app2)
	produce("b", "d", "d", "a")
	waitTable("every row in PostgreSQL after the restart")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	calls, err := sink.Calls(ctx)
	if err != nil {
		t.Fatal(err)
	}
	retries, err := sqlsink.CheckCalls(calls)
	if err != nil {
		t.Fatal(err)
	}
	if retries < 1 || se == nil {
		t.Fatalf("want the failed batch retried with the same rows; calls %v", calls)
	}
	seen := 0
	for _, c := range calls {
		if c.Partition == se.Partition && c.BatchID == se.BatchID {
			seen++
		}
	}
	if seen < 2 {
		t.Fatalf("failed batch p%d/%d not among the calls %v", se.Partition, se.BatchID, calls)
	}
	t.Logf("PostgreSQL table equals the model %v; %d sink calls, %d retries with identical rows", model, len(calls), retries)
}
