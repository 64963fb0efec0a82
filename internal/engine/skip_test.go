package engine

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// TestSkipRecord: a skip entry written to the changelog by hand (as
// kstate.SkipRecord does) makes the restored task drop exactly that record:
// the records before and after it in the same batch are processed, the
// skip survives an aborted batch and a batch that does not reach it, and
// the batch that passes it consumes it in its own changelog records.
func TestSkipRecord(t *testing.T) {
	var logs bytes.Buffer
	cfg := strCfg(echo, processor.NoTime)
	cfg.ValueSerde = serde.DeserializerFunc[string](func(b []byte) (string, error) {
		if string(b) == "poison" {
			return "", errors.New("poison value")
		}
		return string(b), nil
	})
	cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	equal(t, "outputs", h.run(0, h.rec("a", "1", 0)), []string{"a=1"})

	batch := []Record{h.rec("b", "2", 0), h.rec("a", "poison", 0), h.rec("c", "3", 0)}
	_, err := h.task.RunBatch(0, batch)
	var de *DecodeError
	if !errors.As(err, &de) || de.Offset != 2 {
		t.Fatalf("RunBatch = %v, want the DecodeError at offset 2", err)
	}
	h.task.Abort()
	h.task.Close()

	// kstate.SkipRecord, with the application stopped.
	k, v := SkipRecord("in", 2)
	h.log = append(h.log, changelog.Record{Key: k, Value: v, Offset: int64(len(h.log))})
	h.mustOpen("")
	if got := h.task.PendingSkip(0); got != 2 {
		t.Fatalf("PendingSkip = %d, want 2", got)
	}
	// A batch that does not reach the offset keeps the skip and writes
	// no skip entry.
	res, err := h.task.RunBatch(0, batch[:1])
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res.Changelog {
		if _, _, ok := SkipOffset(r.Key, r.Value); ok {
			t.Fatalf("a batch before the skipped offset wrote the skip entry (offset %d)", getInt(r.Value))
		}
	}
	h.task.Abort()
	// An aborted batch that passed it keeps it too.
	if _, err := h.task.RunBatch(0, batch); err != nil {
		t.Fatal(err)
	}
	h.task.Abort()
	if got := h.task.PendingSkip(0); got != 2 {
		t.Fatalf("PendingSkip after an aborted batch = %d, want 2", got)
	}
	res, err = h.task.RunBatch(0, batch)
	if err != nil {
		t.Fatal(err)
	}
	equal(t, "outputs", outs(res), []string{"b=2", "c=3"})
	consumed := false
	for _, r := range res.Changelog {
		if topic, off, ok := SkipOffset(r.Key, r.Value); ok {
			consumed = topic == "in" && off < 0
		}
	}
	if !consumed {
		t.Fatal("the batch passing the skipped offset did not consume the skip in its changelog records")
	}
	h.log = append(h.log, res.Changelog...)
	if err := h.task.Commit(int64(len(h.log))); err != nil {
		t.Fatal(err)
	}
	if c := h.task.Counters(); c.Skipped != 1 || c.RowsIn != 2 || c.DecodeErrors != 0 {
		t.Fatalf("counters %+v, want Skipped 1, RowsIn 2 (b and c)", c)
	}
	if !strings.Contains(logs.String(), "skipping the input record as asked") || !strings.Contains(logs.String(), "offset=2") {
		t.Fatalf("no warning naming the skipped offset:\n%s", logs.String())
	}
	if got := h.task.PendingSkip(0); got != -1 {
		t.Fatalf("PendingSkip after the commit = %d, want -1", got)
	}
	// Restored from the changelog, the skip is gone: the offset read
	// again (offsets moved back by hand) fails again.
	h.task.Close()
	h.mustOpen("")
	if got := h.task.PendingSkip(0); got != -1 {
		t.Fatalf("PendingSkip after a restore = %d, want -1", got)
	}
	if _, err := h.task.RunBatch(0, batch[1:2]); !errors.As(err, &de) {
		t.Fatalf("RunBatch of the offset again = %v, want its DecodeError", err)
	}
	h.task.Abort()
}

// TestSkipRecordMissingOffset: a skip whose offset is not in the input
// (retention removed it, or it was a transaction marker) is consumed by the
// first batch past it, and nothing else is dropped.
func TestSkipRecordMissingOffset(t *testing.T) {
	h := &harness[string, string, string]{t: t, cfg: strCfg(echo, processor.NoTime)}
	k, v := SkipRecord("in", 1)
	h.log = append(h.log, changelog.Record{Key: k, Value: v})
	h.mustOpen("")
	h.offset = 5
	equal(t, "outputs", h.run(0, h.rec("a", "1", 0), h.rec("b", "2", 0)), []string{"a=1", "b=2"})
	if got := h.task.PendingSkip(0); got != -1 {
		t.Fatalf("PendingSkip = %d, want -1", got)
	}
	if c := h.task.Counters(); c.Skipped != 0 {
		t.Fatalf("Skipped = %d, want 0", c.Skipped)
	}
}
