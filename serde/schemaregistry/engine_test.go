package schemaregistry_test

import (
	"errors"
	"iter"
	"slices"
	"strconv"
	"testing"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/serde/schemaregistry"
	"github.com/kstate/kstate/state"
)

// centsSum sums the cents of each key's orders and emits "key=sum".
type centsSum struct{ sum state.ValueState[int64] }

func (p *centsSum) Init(h processor.Handle) (err error) {
	p.sum, err = processor.NewValueState(h, "sum", state.Int64())
	return err
}

func (p *centsSum) HandleInputRows(key string, rows iter.Seq[OrderV2], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := p.sum.Get()
	if err != nil {
		return err
	}
	for o := range rows {
		n += o.Cents
	}
	if err := p.sum.Update(n); err != nil {
		return err
	}
	return out.Emit(key + "=" + strconv.FormatInt(n, 10))
}

func (p *centsSum) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (p *centsSum) Close() error { return nil }

// TestEngineRegistryDown: as a ValueSerde, a record of a schema id the
// serde has not seen, read while the registry is down, stops the batch
// under every OnDecodeError policy (it is not undecodable: skipping or
// dead-lettering it would lose a good record); records of an unknown id,
// a real decode error, meet the policy. Once the registry is back, the
// same records are processed exactly.
func TestEngineRegistryDown(t *testing.T) {
	for _, policy := range []kstate.DecodeErrorPolicy{kstate.DecodeErrorFail, kstate.DecodeErrorSkip, kstate.DecodeErrorDeadLetter} {
		t.Run(strconv.Itoa(int(policy)), func(t *testing.T) {
			srv := srtest.Start(t, srtest.Options{})
			o := schemaregistry.Options{Topic: "orders", AutoRegister: true}
			w1, err := schemaregistry.Avro[OrderV1](ctx, client(t, srv, schemaregistry.Config{}), orderV1, o)
			if err != nil {
				t.Fatal(err)
			}
			r2, err := schemaregistry.Avro[OrderV2](ctx, client(t, srv, schemaregistry.Config{}), orderV2, o)
			if err != nil {
				t.Fatal(err)
			}
			d := kstatetest.New(t, kstate.Topology[string, OrderV2, string]{
				KeySerde:      serde.String(),
				Inputs:        kstate.Topics(r2, "input"),
				OnDecodeError: policy,
				NewProcessor:  func() processor.StatefulProcessor[string, OrderV2, string] { return &centsSum{} },
				Output: kstate.Output[string, string]{
					Serde: serde.String(),
				},
			}, kstatetest.ApplicationID("sr"))
			v1rec, _ := w1.Serialize(OrderV1{ID: 1, Item: "tea", Cents: 5})
			v2rec, _ := r2.Serialize(OrderV2{ID: 2, Cents: 7})
			feed := func() {
				d.InputRecord([]byte("a"), v2rec, d.Now())
				d.InputRecord([]byte("a"), v1rec, d.Now())
			}
			srv.SetDown(true)
			feed()
			err = d.RunBatch()
			var de *kstate.DecodeError
			if !errors.As(err, &de) || de.Offset != 1 || !errors.Is(err, serde.ErrUnavailable) || !errors.Is(err, schemaregistry.ErrUnavailable) {
				t.Fatalf("registry down: RunBatch = %v, want the DecodeError of offset 1 wrapping ErrUnavailable", err)
			}
			if out, dl, c := d.OutputValues(), d.DeadLetters(), d.Counters(); len(out) != 0 || len(dl) != 0 || c.Skipped != 0 || c.DecodeErrors != 0 {
				t.Fatalf("after the failed batch: outputs %q, dead letters %d, counters %+v", out, len(dl), c)
			}
			srv.SetDown(false)
			feed()
			d.MustRunBatch()
			if got, want := d.OutputValues(), []string{"a=12"}; !slices.Equal(got, want) {
				t.Fatalf("registry back: outputs %q, want %q", got, want)
			}
			if policy == kstate.DecodeErrorFail {
				return
			}
			// An unknown id is the record's fault: the policy applies.
			d.InputRecord([]byte("a"), append([]byte{0, 0, 0, 0x03, 0xe7}, v2rec[5:]...), d.Now())
			d.InputRecord([]byte("a"), v2rec, d.Now())
			d.MustRunBatch()
			if got, want := d.OutputValues(), []string{"a=19"}; !slices.Equal(got, want) {
				t.Fatalf("unknown id: outputs %q, want %q", got, want)
			}
			if c := d.Counters(); c.DecodeErrors != 1 {
				t.Fatalf("unknown id: counters %+v, want 1 decode error", c)
			}
		})
	}
}
