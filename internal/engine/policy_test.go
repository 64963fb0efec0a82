package engine

import (
	"bytes"
	"errors"
	"iter"
	"log/slog"
	"strings"
	"testing"

	"github.com/kstate/kstate/processor"
)

// echo emits every row as is.
func echo() processor.StatefulProcessor[string, string, string] {
	return &fnProc[string, string, string]{input: func(_ processor.Handle, _ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
		for r := range rows {
			if err := out.Emit(r); err != nil {
				return err
			}
		}
		return nil
	}}
}

// TestKeyPartitionPolicies: a record flagged misrouted under Allow is
// processed, counted, and warned about once per task; under Fail it fails
// the batch with a DecodeError wrapping ErrKeyPartition; under DeadLetter
// it becomes a dead-letter record of stage "partition".
func TestKeyPartitionPolicies(t *testing.T) {
	misrouted := func(h *harness[string, string, string], key, value string) Record {
		r := h.rec(key, value, 0)
		r.Misrouted, r.KeyPartition = true, 5
		return r
	}
	t.Run("allow", func(t *testing.T) {
		var logs bytes.Buffer
		cfg := strCfg(echo, processor.NoTime)
		cfg.OnKeyPartition = PolicyAllow
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		h := &harness[string, string, string]{t: t, cfg: cfg}
		h.mustOpen("")
		equal(t, "outputs", h.run(0, misrouted(h, "a", "1"), h.rec("b", "2", 0)), []string{"a=1", "b=2"})
		equal(t, "outputs", h.run(0, misrouted(h, "a", "3")), []string{"a=3"})
		if c := h.task.Counters(); c.KeyPartitionMismatches != 2 || c.DeadLettered != 0 {
			t.Fatalf("counters %+v", c)
		}
		if n := strings.Count(logs.String(), "level=WARN"); n != 1 {
			t.Fatalf("%d warnings, want 1:\n%s", n, logs.String())
		}
		// The warning names the key, where it hashes, where it was read
		// and the producer setting that fixes it.
		for _, w := range []string{`key \"a\" hashes`, "to partition 5 but was read from partition 3", "-X topic.partitioner=murmur2_random", "KeyPartitionDeadLetter"} {
			if !strings.Contains(logs.String(), w) {
				t.Fatalf("warning lacks %q:\n%s", w, logs.String())
			}
		}
	})
	t.Run("fail", func(t *testing.T) {
		cfg := strCfg(echo, processor.NoTime)
		cfg.OnKeyPartition = PolicyFail
		h := &harness[string, string, string]{t: t, cfg: cfg}
		h.mustOpen("")
		_, err := h.task.RunBatch(0, []Record{h.rec("b", "2", 0), misrouted(h, "a", "1")})
		var de *DecodeError
		if !errors.As(err, &de) || de.Offset != 1 || de.Part != "key" || !errors.Is(err, ErrKeyPartition) || !strings.Contains(err.Error(), "partition 5") {
			t.Fatalf("RunBatch = %v, want a DecodeError at offset 1 wrapping ErrKeyPartition", err)
		}
		h.task.Abort()
	})
	t.Run("dead-letter", func(t *testing.T) {
		cfg := strCfg(echo, processor.NoTime)
		cfg.OnKeyPartition = PolicyDeadLetter
		h := &harness[string, string, string]{t: t, cfg: cfg}
		h.mustOpen("")
		res, err := h.task.RunBatch(42, []Record{h.rec("b", "2", 0), misrouted(h, "a", "1")})
		if err != nil {
			t.Fatal(err)
		}
		equal(t, "outputs", outs(res), []string{"b=2"})
		if len(res.DeadLetters) != 1 {
			t.Fatalf("dead letters %+v", res.DeadLetters)
		}
		d := res.DeadLetters[0]
		hs := map[string]string{}
		for _, x := range d.Headers {
			hs[x.Key] = string(x.Value)
		}
		if string(d.Key) != "a" || string(d.Value) != "1" || hs[HeaderStage] != StagePartition || hs[HeaderSourceOffset] != "1" ||
			hs[HeaderSourcePartition] != "3" || hs[HeaderTime] != "42" || hs[HeaderApplication] != "app" {
			t.Fatalf("dead letter %s=%s %v", d.Key, d.Value, hs)
		}
		h.task.Abort()
	})
}

// TestDeadLetterKeepsOriginalHeaders: the input record's own headers come
// first, unchanged, then kstate's.
func TestDeadLetterKeepsOriginalHeaders(t *testing.T) {
	cfg := strCfg(echo, processor.NoTime)
	cfg.OnDecodeError = PolicyDeadLetter
	h := &harness[string, string, string]{t: t, cfg: cfg}
	h.mustOpen("")
	r := h.rec("", "v", 7)
	r.Key = nil
	r.Headers = []Header{{Key: "trace", Value: []byte("t1")}}
	res, err := h.task.RunBatch(0, []Record{r})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.DeadLetters) != 1 || res.Empty {
		t.Fatalf("result %+v", res)
	}
	d := res.DeadLetters[0]
	if d.Key != nil || d.TimestampMs != 7 || d.Headers[0].Key != "trace" || string(d.Headers[0].Value) != "t1" || len(d.Headers) != 8 {
		t.Fatalf("dead letter %+v", d)
	}
	h.task.Abort()
}
