package enginetest

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// ErrSinkInjected is the error of a sink call failed by "sink-fail".
var ErrSinkInjected = errors.New("enginetest: injected sink failure")

// SinkDB is the external database of the foreachBatch scenarios: it
// outlives instances (a crash does not touch it), records every call, and
// applies a batch idempotently — a (partition, batch id) at or below the
// partition's high-water mark is skipped, as a real sink does it in the
// same SQL transaction as the rows.
type SinkDB struct {
	mu    sync.Mutex
	calls []sinkCall
	hwm   map[int32]int64
	table map[string]string // key → last value written
	fail  int               // fail the next fail calls
}

type sinkCall struct {
	inst    string
	part    int32
	id      int64
	rows    string
	skipped bool
}

func newSinkDB() *SinkDB { return &SinkDB{hwm: map[int32]int64{}, table: map[string]string{}} }

// write is the sink of instance inst.
func (d *SinkDB) write(inst string, part int32, id int64, keys, values []string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.fail > 0 {
		d.fail--
		return fmt.Errorf("p%d batch %d: %w", part, id, ErrSinkInjected)
	}
	rows := make([]string, len(keys))
	for i := range keys {
		rows[i] = keys[i] + "=" + values[i]
	}
	c := sinkCall{inst: inst, part: part, id: id, rows: strings.Join(rows, " ")}
	if h, ok := d.hwm[part]; ok && id <= h {
		c.skipped = true
	} else {
		for i := range keys {
			d.table[keys[i]] = values[i]
		}
		d.hwm[part] = id
	}
	d.calls = append(d.calls, c)
	return nil
}

// show lists the calls, then the table and the check that every batch id
// seen more than once carried the same rows each time.
func (d *SinkDB) show() string {
	d.mu.Lock()
	defer d.mu.Unlock()
	var lines []string
	type pid struct {
		p  int32
		id int64
	}
	first := map[pid]string{}
	var dups, mismatches []string
	for _, c := range d.calls {
		s := fmt.Sprintf("%s: p%d batch %d: %s", c.inst, c.part, c.id, c.rows)
		if c.skipped {
			s += " (skipped: at or below the high-water mark)"
		}
		lines = append(lines, s)
		k := pid{c.part, c.id}
		if r, ok := first[k]; ok {
			if r == c.rows {
				dups = append(dups, fmt.Sprintf("p%d/%d", c.part, c.id))
			} else {
				mismatches = append(mismatches, fmt.Sprintf("p%d/%d", c.part, c.id))
			}
		} else {
			first[k] = c.rows
		}
	}
	ks := make([]string, 0, len(d.table))
	for k := range d.table {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	var tbl []string
	for _, k := range ks {
		tbl = append(tbl, k+"="+d.table[k])
	}
	lines = append(lines, "table: "+strings.Join(tbl, " "))
	lines = append(lines, fmt.Sprintf("seen twice with the same rows: %v; with different rows: %v", dups, mismatches))
	return strings.Join(lines, "\n")
}

// sinkFor returns the engine sink of instance name, or nil without a sink.
func (e *Env) sinkFor(on bool, name string) func(ctx context.Context, part int32, id int64, keys, values []string) error {
	if !on {
		return nil
	}
	return func(_ context.Context, part int32, id int64, keys, values []string) error {
		return e.sinkDB.write(name, part, id, keys, values)
	}
}
