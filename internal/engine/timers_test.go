package engine

import (
	"errors"
	"fmt"
	"iter"
	"strconv"
	"testing"

	"github.com/kstate/kstate/processor"
)

func timerLog(fired *[]string, onFire func(h processor.Handle, key string, exp int64) error) func() processor.StatefulProcessor[string, string, string] {
	return func() processor.StatefulProcessor[string, string, string] {
		return &fnProc[string, string, string]{
			input: func(h processor.Handle, key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
				for v := range rows {
					ms, err := strconv.ParseInt(v[1:], 10, 64)
					if err != nil {
						return err
					}
					switch v[0] {
					case 'r':
						err = h.RegisterTimer(ms)
					case 'd':
						err = h.DeleteTimer(ms)
					}
					if err != nil {
						return err
					}
				}
				return nil
			},
			timer: func(h processor.Handle, key string, tv processor.TimerValues, t processor.ExpiredTimerInfo, out processor.Emitter[string]) error {
				*fired = append(*fired, fmt.Sprintf("%s@%d", key, t.ExpiryTimeMs))
				if onFire != nil {
					if err := onFire(h, key, t.ExpiryTimeMs); err != nil {
						return err
					}
				}
				return out.Emit(fmt.Sprintf("fired@%d/now=%d", t.ExpiryTimeMs, tv.ProcessingTimeMs()))
			},
		}
	}
}

func TestTimersFireInExpiryThenKeyOrder(t *testing.T) {
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, nil), processor.ProcessingTime)}
	h.mustOpen("")
	h.run(1000, h.rec("b", "r2000", 0), h.rec("a", "r2000", 0), h.rec("c", "r1500", 0), h.rec("a", "r3000", 0), h.rec("a", "r2000", 0))
	if len(fired) != 0 {
		t.Fatalf("fired %v before their time", fired)
	}
	out := h.run(2000)
	equal(t, "fired", fired, []string{"c@1500", "a@2000", "b@2000"})
	equal(t, "outputs", out, []string{"c=fired@1500/now=2000", "a=fired@2000/now=2000", "b=fired@2000/now=2000"})
	fired = nil
	h.run(2999)
	if len(fired) != 0 {
		t.Fatalf("fired %v again / too early", fired)
	}
	h.run(3000)
	equal(t, "fired", fired, []string{"a@3000"})
	c := h.task.Counters()
	if c.TimersFired != 4 || c.TimersRegistered != 4 || c.TimersDeleted != 4 {
		t.Fatalf("timer counters %+v", c)
	}
}

func TestTimerInThePastFiresInSameBatch(t *testing.T) {
	var fired []string
	h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, nil), processor.ProcessingTime)}
	h.mustOpen("")
	out := h.run(5000, h.rec("k", "r4000", 0), h.rec("k", "r5000", 0), h.rec("k", "r5001", 0))
	equal(t, "fired", fired, []string{"k@4000", "k@5000"})
	equal(t, "out", out, []string{"k=fired@4000/now=5000", "k=fired@5000/now=5000"})
}

func TestTimerDeletedMeanwhileIsSkippedAndReRegisteredFiresNextBatch(t *testing.T) {
	var fired []string
	onFire := func(h processor.Handle, key string, exp int64) error {
		if exp == 10 {
			// Delete a later timer of the same snapshot, and register one
			// in the past: it is not in the snapshot, so it fires next batch.
			if err := h.DeleteTimer(20); err != nil {
				return err
			}
			return h.RegisterTimer(5)
		}
		return nil
	}
	h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, onFire), processor.ProcessingTime)}
	h.mustOpen("")
	h.run(100, h.rec("k", "r10", 0), h.rec("k", "r20", 0), h.rec("k", "r30", 0))
	equal(t, "first batch", fired, []string{"k@10", "k@30"})
	fired = nil
	h.run(100)
	equal(t, "second batch", fired, []string{"k@5"})
	timersLeft := func() []int64 {
		var ts []int64
		h.task.shard.Begin(-1)
		h.task.rt.SetKey([]byte("k"))
		ts, err := h.task.timers.List([]byte("k"))
		h.task.shard.Abort()
		if err != nil {
			t.Fatal(err)
		}
		return ts
	}
	if ts := timersLeft(); len(ts) != 0 {
		t.Fatalf("timers left %v", ts)
	}
}

func TestFailedTimerHandlerKeepsTimer(t *testing.T) {
	var fired []string
	fail := true
	onFire := func(h processor.Handle, key string, exp int64) error {
		if fail {
			return errors.New("boom")
		}
		return nil
	}
	h := &harness[string, string, string]{t: t, cfg: strCfg(timerLog(&fired, onFire), processor.ProcessingTime)}
	h.mustOpen("")
	h.run(0, h.rec("k", "r10", 0))
	_, err := h.task.RunBatch(10, nil)
	var ue *UserError
	if !errors.As(err, &ue) || ue.Method != "HandleExpiredTimer" || ue.Key != `"k"` || ue.Partition != 3 {
		t.Fatalf("error %v", err)
	}
	h.task.Abort()
	fail = false
	fired = nil
	h.run(10)
	equal(t, "retried", fired, []string{"k@10"})
}
