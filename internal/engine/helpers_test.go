package engine

import (
	"errors"
	"iter"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// fnProc is a processor built from closures; nil ones do nothing.
type fnProc[K, I, O any] struct {
	init   func(h processor.Handle) error
	input  func(h processor.Handle, key K, rows iter.Seq[I], tv processor.TimerValues, out processor.Emitter[O]) error
	timer  func(h processor.Handle, key K, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[O]) error
	inital func(h processor.Handle, key K, v I, tv processor.TimerValues) error
	closed *int
	h      processor.Handle
}

func (p *fnProc[K, I, O]) Init(h processor.Handle) error {
	p.h = h
	if p.init != nil {
		return p.init(h)
	}
	return nil
}

func (p *fnProc[K, I, O]) HandleInputRows(key K, rows iter.Seq[I], tv processor.TimerValues, out processor.Emitter[O]) error {
	if p.input != nil {
		return p.input(p.h, key, rows, tv, out)
	}
	return nil
}

func (p *fnProc[K, I, O]) HandleExpiredTimer(key K, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[O]) error {
	if p.timer != nil {
		return p.timer(p.h, key, tv, t, out)
	}
	return nil
}

func (p *fnProc[K, I, O]) HandleInitialState(key K, v I, tv processor.TimerValues) error {
	if p.inital != nil {
		return p.inital(p.h, key, v, tv)
	}
	return nil
}

func (p *fnProc[K, I, O]) Close() error {
	if p.closed != nil {
		*p.closed++
	}
	return nil
}

// harness drives one task like the root package does, with a fake
// changelog: every committed batch's changelog records get consecutive
// offsets.
type harness[K, I, O any] struct {
	t      *testing.T
	cfg    Config[K, I, O]
	task   *Task[K, I, O]
	log    []changelog.Record // committed changelog
	offset int64              // next input offset
}

// strCfg is a string→string config with processor p in mode m.
func strCfg(p func() processor.StatefulProcessor[string, string, string], m processor.TimeMode) Config[string, string, string] {
	return Config[string, string, string]{
		ApplicationID: "app", RunID: "run", Topic: "in", Partition: 3,
		TimeMode: m, OutputMode: processor.Update,
		KeySerde: serde.String(), ValueSerde: serde.String(), OutputSerde: serde.String(),
		NewProcessor: p,
	}
}

// open starts the task on dir (RocksDB) or, when dir is empty, on a memory
// store restored from the harness' committed changelog.
func (h *harness[K, I, O]) open(dir string) error {
	h.t.Helper()
	cfg := h.cfg
	cfg.Dir = dir
	if dir == "" {
		cfg.Backend = kv.NewMemory()
	}
	task, err := Open(cfg)
	if err != nil {
		return err
	}
	h.task = task
	if from := task.Shard().ChangelogOffset(); from < int64(len(h.log)) {
		if err := task.Shard().ApplyChangelog(h.log[from:], int64(len(h.log))); err != nil {
			h.t.Fatalf("restore: %v", err)
		}
	}
	return task.Start()
}

func (h *harness[K, I, O]) mustOpen(dir string) {
	h.t.Helper()
	if err := h.open(dir); err != nil {
		h.t.Fatalf("open: %v", err)
	}
	h.t.Cleanup(func() { h.task.Close() })
}

// rec makes an input record with the next offset.
func (h *harness[K, I, O]) rec(key, value string, tsMs int64) Record {
	h.offset++
	return Record{Offset: h.offset - 1, Key: []byte(key), Value: []byte(value), TimestampMs: tsMs}
}

// run runs and commits a batch, returning its outputs as "key=value".
func (h *harness[K, I, O]) run(now int64, recs ...Record) []string {
	h.t.Helper()
	res, err := h.task.RunBatch(now, recs)
	if err != nil {
		h.task.Abort()
		h.t.Fatalf("batch at %d: %v", now, err)
	}
	h.log = append(h.log, res.Changelog...)
	next := int64(-1)
	if len(res.Changelog) > 0 {
		next = int64(len(h.log))
	}
	if err := h.task.Commit(next); err != nil {
		h.t.Fatalf("commit: %v", err)
	}
	return outs(res)
}

func outs(res *BatchResult) []string {
	var s []string
	for _, o := range res.Outputs {
		s = append(s, string(o.Key)+"="+string(o.Value))
	}
	return s
}

func equal(t *testing.T, what string, got, want []string) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: got %q, want %q", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: got %q, want %q", what, got, want)
		}
	}
}

func mustErrIs(t *testing.T, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Fatalf("error %v, want one wrapping %v", err, target)
	}
}
