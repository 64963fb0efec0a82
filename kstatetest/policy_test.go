package kstatetest_test

import (
	"errors"
	"iter"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// flaky sums the rows of each key (values are decimal numbers), emits
// "key=sum" after every row and registers a timer at batch time + 1s per
// row. Row values with a meaning: "fail" returns an error, "panic"
// panics, "unser" emits an output the Output.Serde refuses, "huge" emits an
// output larger than the producer sends. A timer of key "tbad" fails
// after writing state and emitting.
type flaky struct {
	h   processor.Handle
	sum state.ValueState[int64]
}

func (f *flaky) Init(h processor.Handle) (err error) {
	f.h = h
	f.sum, err = processor.NewValueState(h, "sum", state.Int64())
	return err
}

func (f *flaky) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := f.sum.Get()
	if err != nil {
		return err
	}
	for v := range rows {
		switch v {
		case "fail":
			return errors.New("refused")
		case "panic":
			panic("exploded")
		case "unser":
			if err := out.Emit("unserializable"); err != nil {
				return err
			}
			continue
		case "huge":
			if err := out.Emit(strings.Repeat("x", 2<<20)); err != nil {
				return err
			}
			continue
		}
		d, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return err
		}
		n += d
		if err := f.sum.Update(n); err != nil {
			return err
		}
		if err := f.h.RegisterTimer(tv.ProcessingTimeMs() + 1000); err != nil {
			return err
		}
		if err := out.Emit(key + "=" + strconv.FormatInt(n, 10)); err != nil {
			return err
		}
	}
	return nil
}

func (f *flaky) HandleExpiredTimer(key string, _ processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
	if err := f.sum.Update(-1); err != nil {
		return err
	}
	if err := out.Emit(key + " timer"); err != nil {
		return err
	}
	if key == "tbad" {
		return errors.New("timer refused")
	}
	return nil
}

func (f *flaky) Close() error { return nil }

// outSerde refuses "unserializable".
var outSerde = serde.SerializerFunc[string](func(s string) ([]byte, error) {
	if s == "unserializable" {
		return nil, errors.New("cannot encode")
	}
	return []byte(s), nil
})

// numSerde decodes values; "poison" does not decode.
type numSerde struct{}

func (numSerde) Serialize(s string) ([]byte, error) { return []byte(s), nil }
func (numSerde) Deserialize(b []byte) (string, error) {
	if string(b) == "poison" {
		return "", errors.New("poison value")
	}
	return string(b), nil
}

func flakyConfig() kstate.Topology[string, string, string] {
	return kstate.Topology[string, string, string]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(numSerde{}, "input"),
		TimeMode:     processor.ProcessingTime,
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &flaky{} },
		Output: kstate.Output[string, string]{
			Serde: outSerde,
		},
	}
}

func sumOf(t *testing.T, d *kstatetest.Driver[string, string, string], key string) (int64, bool) {
	t.Helper()
	return kstatetest.ValueOf(d, key, "sum", state.Int64())
}

// TestDeadLetterFailingKeys: under ProcessingErrorDeadLetter each way a
// key's call can fail dead-letters exactly that key's rows, discards its
// state, timer and output changes of the batch, and commits every other
// key exactly.
func TestDeadLetterFailingKeys(t *testing.T) {
	for _, bad := range []string{"fail", "panic", "unser", "huge"} {
		t.Run(bad, func(t *testing.T) {
			cfg := flakyConfig()
			cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
			d := kstatetest.New(t, cfg, kstatetest.ApplicationID("flaky"), kstatetest.Partitions(2))
			d.Input("a", "1")
			d.Input("bad", "10")
			d.MustRunBatch()
			d.Outputs()
			timersBefore := d.Timers("bad")

			d.AdvanceClock(10 * time.Millisecond) // timers stay in the future
			d.Input("a", "2")
			d.Input("bad", "5") // written, then discarded
			d.Input("bad", bad)
			d.Input("c", "7")
			d.MustRunBatch()

			if got, want := d.OutputValues(), []string{"a=3", "c=7"}; !sameSet(got, want) {
				t.Errorf("outputs %q, want %q (no output of bad)", got, want)
			}
			if n, _ := sumOf(t, d, "a"); n != 3 {
				t.Errorf("a = %d, want 3", n)
			}
			if n, _ := sumOf(t, d, "bad"); n != 10 {
				t.Errorf("bad = %d, want 10 (its batch discarded)", n)
			}
			if got := d.Timers("bad"); !slices.Equal(got, timersBefore) {
				t.Errorf("timers of bad = %v, want %v (the batch's registration discarded)", got, timersBefore)
			}
			dl := d.DeadLetters()
			if len(dl) != 2 {
				t.Fatalf("%d dead letters, want 2 (both rows of bad): %+v", len(dl), dl)
			}
			for i, want := range []string{"5", bad} {
				r := dl[i]
				if string(r.Key) != "bad" || string(r.Value) != want {
					t.Errorf("dead letter %d = %s=%s, want bad=%s", i, r.Key, r.Value, want)
				}
				h := r.Headers
				if h[kstate.HeaderStage] != "process" || h[kstate.HeaderApplication] != "flaky" ||
					h[kstate.HeaderSourceTopic] != "input" || h[kstate.HeaderSourcePartition] != strconv.Itoa(int(d.Partition("bad"))) ||
					h[kstate.HeaderSourceOffset] == "" || h[kstate.HeaderTime] != strconv.FormatInt(d.Now().UnixMilli(), 10) ||
					!strings.Contains(h[kstate.HeaderError], `HandleInputRows(key "bad")`) {
					t.Errorf("dead letter %d headers %v", i, h)
				}
				if r.Timestamp.IsZero() {
					t.Errorf("dead letter %d has no timestamp", i)
				}
			}
			if bad == "huge" && !strings.Contains(dl[0].Headers[kstate.HeaderError], "too large") {
				t.Errorf("error header %q does not say too large", dl[0].Headers[kstate.HeaderError])
			}
			c := d.Counters()
			if c.DeadLettered != 2 || c.ProcessingErrors != 1 {
				t.Errorf("DeadLettered %d, ProcessingErrors %d; want 2, 1", c.DeadLettered, c.ProcessingErrors)
			}

			// The key is not poisoned: its next good rows work on the old state.
			d.Input("bad", "1")
			d.MustRunBatch()
			if got := d.OutputValues(); !slices.Equal(got, []string{"bad=11"}) {
				t.Errorf("after recovery: outputs %q, want [bad=11]", got)
			}
		})
	}
}

// TestProcessingErrorFailDefault: the default stops at the first failing
// key and commits nothing of the batch.
func TestProcessingErrorFailDefault(t *testing.T) {
	d := kstatetest.New(t, flakyConfig(), kstatetest.ApplicationID("flaky"))
	d.Input("z", "1")
	d.MustRunBatch()
	d.Outputs()
	d.Input("a", "1")
	d.Input("bad", "fail")
	var ue *kstate.UserError
	if err := d.RunBatch(); !errors.As(err, &ue) || ue.Key != `"bad"` {
		t.Fatalf("RunBatch = %v, want a UserError of key bad", err)
	}
	if out := d.OutputValues(); len(out) != 0 {
		t.Fatalf("outputs %q after a failed batch", out)
	}
	if _, ok := sumOf(t, d, "a"); ok {
		t.Fatal("a has state after a failed batch")
	}
}

// TestDeadLetterFailingTimer: a failing timer's changes and outputs are
// discarded, a record describes it, and it is deleted (it does not fail
// again in the next batch).
func TestDeadLetterFailingTimer(t *testing.T) {
	cfg := flakyConfig()
	cfg.OnProcessingError = kstate.ProcessingErrorDeadLetter
	d := kstatetest.New(t, cfg, kstatetest.ApplicationID("flaky"))
	d.Input("tbad", "4")
	d.Input("a", "1")
	d.MustRunBatch()
	d.Outputs()
	expiry := d.Timers("tbad")
	if len(expiry) != 1 {
		t.Fatalf("timers of tbad %v", expiry)
	}
	d.AdvanceClock(2 * time.Second)
	d.MustRunBatch()
	if got, want := d.OutputValues(), []string{"a timer"}; !slices.Equal(got, want) {
		t.Fatalf("outputs %q, want %q", got, want)
	}
	if n, _ := sumOf(t, d, "tbad"); n != 4 {
		t.Fatalf("tbad = %d, want 4 (the timer's update discarded)", n)
	}
	if n, _ := sumOf(t, d, "a"); n != -1 {
		t.Fatalf("a = %d, want -1 (its timer committed)", n)
	}
	dl := d.DeadLetters()
	if len(dl) != 1 || string(dl[0].Key) != "tbad" || dl[0].Value != nil ||
		dl[0].Headers[kstate.HeaderTimerExpiry] != strconv.FormatInt(expiry[0], 10) || dl[0].Headers[kstate.HeaderStage] != "process" ||
		!dl[0].Timestamp.Equal(time.UnixMilli(expiry[0])) {
		t.Fatalf("dead letters %+v", dl)
	}
	if got := d.Timers("tbad"); len(got) != 0 {
		t.Fatalf("failed timer kept: %v", got)
	}
	d.AdvanceClock(2 * time.Second)
	d.MustRunBatch()
	if dl := d.DeadLetters(); len(dl) != 0 {
		t.Fatalf("the failed timer failed again: %+v", dl)
	}
}

// TestDecodePolicies: an undecodable value and a nil key under each
// OnDecodeError policy.
func TestDecodePolicies(t *testing.T) {
	feed := func(d *kstatetest.Driver[string, string, string]) {
		ts := d.Now()
		d.InputRecord([]byte("a"), []byte("1"), ts)
		d.InputRecord([]byte("a"), []byte("poison"), ts)
		d.InputRecord(nil, []byte("2"), ts)
		d.InputRecord([]byte("a"), []byte("3"), ts)
	}
	t.Run("fail", func(t *testing.T) {
		d := kstatetest.New(t, flakyConfig(), kstatetest.ApplicationID("flaky"))
		feed(d)
		var de *kstate.DecodeError
		if err := d.RunBatch(); !errors.As(err, &de) || de.Part != "value" || de.Offset != 1 {
			t.Fatalf("RunBatch = %v, want the DecodeError of offset 1", err)
		}
		if out := d.OutputValues(); len(out) != 0 {
			t.Fatalf("outputs %q after a failed batch", out)
		}
		d.InputRecord(nil, []byte("2"), d.Now())
		if err := d.RunBatch(); !errors.As(err, &de) || de.Part != "key" || !errors.Is(err, kstate.ErrNilKey) {
			t.Fatalf("nil key: RunBatch = %v, want a DecodeError wrapping ErrNilKey", err)
		}
	})
	t.Run("skip", func(t *testing.T) {
		cfg := flakyConfig()
		cfg.OnDecodeError = kstate.DecodeErrorSkip
		d := kstatetest.New(t, cfg, kstatetest.ApplicationID("flaky"))
		feed(d)
		d.MustRunBatch()
		if got, want := d.OutputValues(), []string{"a=1", "a=4"}; !slices.Equal(got, want) {
			t.Fatalf("outputs %q, want %q", got, want)
		}
		if c := d.Counters(); c.Skipped != 2 || c.DecodeErrors != 2 || c.DeadLettered != 0 || c.RowsIn != 2 {
			t.Fatalf("counters %+v", c)
		}
		if dl := d.DeadLetters(); len(dl) != 0 {
			t.Fatalf("dead letters under Skip: %+v", dl)
		}
	})
	t.Run("dead-letter", func(t *testing.T) {
		cfg := flakyConfig()
		cfg.OnDecodeError = kstate.DecodeErrorDeadLetter
		d := kstatetest.New(t, cfg, kstatetest.ApplicationID("flaky"))
		feed(d)
		d.MustRunBatch()
		if got, want := d.OutputValues(), []string{"a=1", "a=4"}; !slices.Equal(got, want) {
			t.Fatalf("outputs %q, want %q", got, want)
		}
		dl := d.DeadLetters()
		if len(dl) != 2 {
			t.Fatalf("dead letters %+v, want 2", dl)
		}
		if r := dl[0]; string(r.Key) != "a" || string(r.Value) != "poison" || r.Headers[kstate.HeaderStage] != "decode" ||
			r.Headers[kstate.HeaderSourceOffset] != "1" || !strings.Contains(r.Headers[kstate.HeaderError], "poison value") {
			t.Errorf("poison dead letter %+v", r)
		}
		if r := dl[1]; r.Key != nil || string(r.Value) != "2" || r.Headers[kstate.HeaderSourceOffset] != "2" ||
			!strings.Contains(r.Headers[kstate.HeaderError], "nil key") {
			t.Errorf("nil-key dead letter %+v", r)
		}
		if c := d.Counters(); c.DeadLettered != 2 || c.DecodeErrors != 2 || c.Skipped != 0 {
			t.Fatalf("counters %+v", c)
		}
	})
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
