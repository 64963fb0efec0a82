// Package sqlsink is a kstate.Sink that upserts per-key results into a SQL
// table, exactly once end to end: each batch's rows and the partition's
// high-water mark (the last batch id written) are written in ONE database
// transaction, and a batch whose id is not above the mark is skipped — it
// is a retry of a batch already written, with the same rows (kstate's
// batch ids are stable across retries). It works with SQLite
// (modernc.org/sqlite) and PostgreSQL (pgx's database/sql driver).
package sqlsink

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"

	"github.com/kstate/kstate"
)

// Dialect is the SQL flavour: placeholders differ.
type Dialect int

const (
	SQLite Dialect = iota
	Postgres
)

// Sink writes each row of a batch as (key, value) into Table, replacing
// the key's value (the processors emit the key's latest result).
type Sink struct {
	db      *sql.DB
	dialect Dialect
	table   string
	// calls, when set (tests), appends every call (partition, batch id,
	// rows) to <table>_calls in a transaction of its own before the upsert,
	// so that a test can check that a batch id seen twice had the same
	// rows both times.
	calls bool
}

var validName = regexp.MustCompile(`^[a-z_][a-z0-9_]*$`)

// Open creates the tables if missing: <table>(k, v), <table>_hwm(part,
// batch_id) and, with recordCalls, <table>_calls.
func Open(ctx context.Context, db *sql.DB, d Dialect, table string, recordCalls bool) (*Sink, error) {
	if !validName.MatchString(table) {
		return nil, fmt.Errorf("sqlsink: table name %q: want lower-case letters, digits and _", table)
	}
	s := &Sink{db: db, dialect: d, table: table, calls: recordCalls}
	stmts := []string{
		`CREATE TABLE IF NOT EXISTS ` + table + ` (k TEXT PRIMARY KEY, v TEXT NOT NULL)`,
		`CREATE TABLE IF NOT EXISTS ` + table + `_hwm (part INTEGER PRIMARY KEY, batch_id BIGINT NOT NULL)`,
	}
	if recordCalls {
		stmts = append(stmts, `CREATE TABLE IF NOT EXISTS `+table+`_calls (part INTEGER NOT NULL, batch_id BIGINT NOT NULL, rows_text TEXT NOT NULL)`)
	}
	for _, q := range stmts {
		if _, err := db.ExecContext(ctx, q); err != nil {
			return nil, fmt.Errorf("sqlsink: %s: %w", q, err)
		}
	}
	return s, nil
}

// q rewrites ? placeholders to $n for PostgreSQL.
func (s *Sink) q(query string) string {
	if s.dialect != Postgres {
		return query
	}
	var b strings.Builder
	n := 0
	for _, c := range query {
		if c == '?' {
			n++
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		b.WriteRune(c)
	}
	return b.String()
}

// WriteBatch implements kstate.Sink.
func (s *Sink) WriteBatch(ctx context.Context, b kstate.SinkBatch[string, string]) error {
	if s.calls {
		rows := make([]string, len(b.Rows))
		for i, r := range b.Rows {
			rows[i] = r.Key + "=" + r.Value
		}
		if _, err := s.db.ExecContext(ctx, s.q(`INSERT INTO `+s.table+`_calls (part, batch_id, rows_text) VALUES (?, ?, ?)`),
			b.Partition, b.ID, strings.Join(rows, " ")); err != nil {
			return fmt.Errorf("sqlsink: record call: %w", err)
		}
	}
	tx, err := s.db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("sqlsink: begin: %w", err)
	}
	defer tx.Rollback()
	var hwm int64
	err = tx.QueryRowContext(ctx, s.q(`SELECT batch_id FROM `+s.table+`_hwm WHERE part = ?`), b.Partition).Scan(&hwm)
	switch {
	case errors.Is(err, sql.ErrNoRows):
	case err != nil:
		return fmt.Errorf("sqlsink: read high-water mark of partition %d: %w", b.Partition, err)
	case b.ID <= hwm:
		return nil // a retry of a batch already written
	}
	for _, r := range b.Rows {
		if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO `+s.table+` (k, v) VALUES (?, ?) ON CONFLICT (k) DO UPDATE SET v = excluded.v`), r.Key, r.Value); err != nil {
			return fmt.Errorf("sqlsink: upsert %q: %w", r.Key, err)
		}
	}
	if _, err := tx.ExecContext(ctx, s.q(`INSERT INTO `+s.table+`_hwm (part, batch_id) VALUES (?, ?) ON CONFLICT (part) DO UPDATE SET batch_id = excluded.batch_id`),
		b.Partition, b.ID); err != nil {
		return fmt.Errorf("sqlsink: high-water mark: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("sqlsink: commit partition %d batch %d: %w", b.Partition, b.ID, err)
	}
	return nil
}

// Table reads the whole result table, key → value.
func (s *Sink) Table(ctx context.Context) (map[string]string, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT k, v FROM `+s.table)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	out := map[string]string{}
	for rows.Next() {
		var k, v string
		if err := rows.Scan(&k, &v); err != nil {
			return nil, err
		}
		out[k] = v
	}
	return out, rows.Err()
}

// Call is one recorded call (recordCalls).
type Call struct {
	Partition int32
	BatchID   int64
	Rows      string
}

// Calls reads the recorded calls, in insertion order.
func (s *Sink) Calls(ctx context.Context) ([]Call, error) {
	rows, err := s.db.QueryContext(ctx, `SELECT part, batch_id, rows_text FROM `+s.table+`_calls`)
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Call
	for rows.Next() {
		var c Call
		if err := rows.Scan(&c.Partition, &c.BatchID, &c.Rows); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CheckCalls returns an error naming every (partition, batch id) that was
// written twice with different rows, and the number of batch ids seen
// more than once (retries).
func CheckCalls(calls []Call) (retries int, err error) {
	first := map[[2]int64]string{}
	var bad []string
	for _, c := range calls {
		k := [2]int64{int64(c.Partition), c.BatchID}
		r, ok := first[k]
		switch {
		case !ok:
			first[k] = c.Rows
		case r == c.Rows:
			retries++
		default:
			bad = append(bad, fmt.Sprintf("partition %d batch %d: %q then %q", c.Partition, c.BatchID, r, c.Rows))
		}
	}
	if len(bad) > 0 {
		return retries, fmt.Errorf("batch ids seen with different rows: %s", strings.Join(bad, "; "))
	}
	return retries, nil
}
