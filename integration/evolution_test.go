package integration

import (
	"context"
	"errors"
	"fmt"
	"iter"
	"maps"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Avro state schema evolution across restarts on a real broker, with the
// local state deleted between runs: every run restores the state from the
// changelog topic, schema history included.

type visitsV1 struct {
	Count int32  `avro:"count"`
	Note  string `avro:"note"`
}

type visitsV2 struct { // count widened, note removed, label added
	Label string `avro:"label" avrodefault:"new"`
	Count int64  `avro:"count"`
}

type visitsNarrow struct {
	Count int32 `avro:"count"`
}

type visits[S any] struct {
	processor.Defaults[string, string]
	inc  func(S) S
	show func(S) string
	v    state.ValueState[S]
}

func (p *visits[S]) Init(h processor.Handle) (err error) {
	p.v, err = processor.NewValueState(h, "visits", state.Avro[S]())
	return err
}

func (p *visits[S]) HandleInputRows(key string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	v, _, err := p.v.Get()
	if err != nil {
		return err
	}
	for range rows {
		v = p.inc(v)
	}
	if err := p.v.Update(v); err != nil {
		return err
	}
	return out.Emit(p.show(v))
}

func TestAvroEvolutionRestoreRealBroker(t *testing.T) {
	t.Parallel()
	e := newSpecEnv(t, 2)
	v1 := func() processor.StatefulProcessor[string, string, string] {
		return &visits[visitsV1]{inc: func(v visitsV1) visitsV1 { v.Count++; v.Note = "v1"; return v },
			show: func(v visitsV1) string { return fmt.Sprintf("%d/%s", v.Count, v.Note) }}
	}
	v2 := func() processor.StatefulProcessor[string, string, string] {
		return &visits[visitsV2]{inc: func(v visitsV2) visitsV2 { v.Count++; return v },
			show: func(v visitsV2) string { return fmt.Sprintf("%d/%s", v.Count, v.Label) }}
	}
	narrow := func() processor.StatefulProcessor[string, string, string] {
		return &visits[visitsNarrow]{inc: func(v visitsNarrow) visitsNarrow { v.Count++; return v },
			show: func(v visitsNarrow) string { return fmt.Sprint(v.Count) }}
	}
	// last is the last output of every key.
	last := func(o testprocs.Outputs) map[string]string {
		m := map[string]string{}
		for k, vs := range o {
			m[k] = vs[len(vs)-1]
		}
		return m
	}
	// runUntil runs a release on an empty state directory until the last
	// outputs of the keys are want, and stops it.
	runUntil := func(rel func() processor.StatefulProcessor[string, string, string], want map[string]string) testprocs.Outputs {
		t.Helper()
		cfg := e.config(t, rel)
		app, err := kstate.New(cfg.Topology, cfg.Options)
		if err != nil {
			t.Fatal(err)
		}
		stop := testprocs.Start(t, app)
		var got testprocs.Outputs
		testprocs.Eventually(t, waitOut, fmt.Sprintf("last outputs %v", want), func() bool {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			got, err = testprocs.Read(ctx, e.brokers, e.out)
			return err == nil && maps.Equal(last(got), want)
		})
		if err := stop(); err != nil && !errors.Is(err, context.Canceled) {
			t.Fatalf("Run: %v", err)
		}
		if err := os.RemoveAll(cfg.State.Dir); err != nil { // the next run restores from the changelog
			t.Fatal(err)
		}
		return got
	}

	testprocs.Produce(t, e.brokers, e.in, "a=x", "a=x", "a=x", "b=x")
	runUntil(v1, map[string]string{"a": "3/v1", "b": "1/v1"})

	// v2: count widened, a field removed and one added; old rows read the
	// added field's default and the count goes on.
	testprocs.Produce(t, e.brokers, e.in, "a=x", "b=x")
	got := runUntil(v2, map[string]string{"a": "4/new", "b": "2/new"})
	before := got.Count()

	// Narrowing count back to int: Run fails at start-up, before any
	// batch; the queued row is not processed.
	testprocs.Produce(t, e.brokers, e.in, "a=x")
	cfg := e.config(t, narrow)
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	err = app.Run(ctx)
	var sce *state.SchemaChangeError
	if !errors.As(err, &sce) || sce.Variable != "visits" || !strings.Contains(err.Error(), `"type":"long"`) || !strings.Contains(err.Error(), "narrowing long → int") {
		t.Fatalf("Run with a narrowed schema: %v, want a *state.SchemaChangeError of visits", err)
	}
	t.Logf("refused at start-up: %v", err)
	os.RemoveAll(cfg.State.Dir)
	rctx, rcancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer rcancel()
	if o, err := testprocs.Read(rctx, e.brokers, e.out); err != nil || o.Count() != before {
		t.Fatalf("after the refused start: %d outputs (%v), want %d", o.Count(), err, before)
	}

	// v2 again, from the changelog: the queued row continues the count.
	got = runUntil(v2, map[string]string{"a": "5/new", "b": "2/new"})
	if got.Count() != before+1 {
		t.Fatalf("outputs %v: want exactly one more than %d", got, before)
	}
}
