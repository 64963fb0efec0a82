package integration

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"testing"
	"time"

	"github.com/hamba/avro/v2"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/serde/schemaregistry"
	"github.com/kstate/kstate/state"
)

// Schema Registry serdes on the real broker, against the stand-in registry
// of internal/srtest (no registry server runs on these machines; the
// testcontainers test schemaregistry_container_test.go runs a real one
// where Docker is).

// srOrderV1 is what the first producers write; srOrderV2 adds a field with
// a default and is what later producers write.
const srOrderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"item","type":"string"},{"name":"cents","type":"int"}]}`
const srOrderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"item","type":"string"},{"name":"cents","type":"int"},
	{"name":"coupon","type":"string","default":""}]}`

// srOrderApp is the application's reader schema: cents widened to long,
// item dropped, currency added with a default.
const srOrderApp = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"cents","type":"long"},{"name":"currency","type":"string","default":"EUR"}]}`

const srTotal = `{"type":"record","name":"Total","namespace":"shop","fields":[
	{"name":"customer","type":"string"},{"name":"orders","type":"long"},
	{"name":"cents","type":"long"},{"name":"currency","type":"string"}]}`

type srOrderV1T struct {
	Item  string `avro:"item"`
	Cents int32  `avro:"cents"`
}

type srOrderV2T struct {
	Item   string `avro:"item"`
	Cents  int32  `avro:"cents"`
	Coupon string `avro:"coupon"`
}

type srOrder struct {
	Cents    int64  `avro:"cents"`
	Currency string `avro:"currency"`
}

type srTotalT struct {
	Customer string `avro:"customer"`
	Orders   int64  `avro:"orders"`
	Cents    int64  `avro:"cents"`
	Currency string `avro:"currency"`
}

// totals sums each customer's orders and emits the running Total once per
// batch.
type totals struct {
	orders, cents state.ValueState[int64]
}

func (p *totals) Init(h processor.Handle) (err error) {
	if p.orders, err = processor.NewValueState(h, "orders", state.Int64()); err != nil {
		return err
	}
	p.cents, err = processor.NewValueState(h, "cents", state.Int64())
	return err
}

func (p *totals) HandleInputRows(key string, rows iter.Seq[srOrder], _ processor.TimerValues, out processor.Emitter[srTotalT]) error {
	n, _, err := p.orders.Get()
	if err != nil {
		return err
	}
	c, _, err := p.cents.Get()
	if err != nil {
		return err
	}
	cur := ""
	for o := range rows {
		n++
		c += o.Cents
		cur = o.Currency
	}
	if err := p.orders.Update(n); err != nil {
		return err
	}
	if err := p.cents.Update(c); err != nil {
		return err
	}
	return out.Emit(srTotalT{Customer: key, Orders: n, Cents: c, Currency: cur})
}

func (p *totals) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[srTotalT]) error {
	return nil
}

func (p *totals) Close() error { return nil }

// An Avro input topic written in the Confluent wire format through the
// serde, by producers on two schema versions, is read by a kstate
// application with a third (reader) schema and summed per key; the Avro
// output, read back with a plain Kafka consumer, is decoded with the
// schema the registry gives for the id in each record's bytes, and the
// last total of every key equals the model.
func TestSchemaRegistryAvroInAndOut(t *testing.T) {
	t.Parallel()
	const parts, customers, perCustomer = 3, 12, 40
	e := newSpecEnv(t, parts)
	reg := srtest.Start(t, srtest.Options{Username: "app", Password: "secret"})
	// The output schema is registered ahead, as a schema pipeline would:
	// the application looks it up (AutoRegister off).
	outID := reg.Register(e.out+"-value", srTotal, "AVRO")

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	newClient := func() *schemaregistry.Client {
		c, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{reg.URL}, Username: "app", Password: "secret"})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	prodReg := newClient()
	w1, err := schemaregistry.Avro[srOrderV1T](ctx, prodReg, srOrderV1, schemaregistry.Options{Topic: e.in, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	w2, err := schemaregistry.Avro[srOrderV2T](ctx, prodReg, srOrderV2, schemaregistry.Options{Topic: e.in, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	if w1.SchemaID() == w2.SchemaID() {
		t.Fatalf("v1 and v2 share schema id %d", w1.SchemaID())
	}

	// Input: customer c<i%customers>, cents i+1; even records on v1, odd on v2.
	type model struct{ orders, cents int64 }
	want := map[string]model{}
	var recs []kafka.Record
	for i := range customers * perCustomer {
		cust := fmt.Sprintf("c%02d", i%customers)
		var v []byte
		if i%2 == 0 {
			v, err = w1.Serialize(srOrderV1T{Item: "x", Cents: int32(i + 1)})
		} else {
			v, err = w2.Serialize(srOrderV2T{Item: "y", Cents: int32(i + 1), Coupon: "c"})
		}
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, kafka.Record{Topic: e.in, Partition: kafka.AnyPartition, Key: []byte(cust), Value: v})
		m := want[cust]
		m.orders++
		m.cents += int64(i + 1)
		want[cust] = m
	}
	p, err := kafka.NewProducer(e.brokers)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
	p.Close()

	// The application: its own registry client, as in another process.
	appReg := newClient()
	in, err := schemaregistry.Avro[srOrder](ctx, appReg, srOrderApp, schemaregistry.Options{Topic: e.in, AutoRegister: true})
	if err != nil {
		t.Fatal(err)
	}
	out, err := schemaregistry.Avro[srTotalT](ctx, appReg, srTotal, schemaregistry.Options{Topic: e.out})
	if err != nil {
		t.Fatal(err)
	}
	if out.SchemaID() != outID {
		t.Fatalf("output serde id %d, registered %d", out.SchemaID(), outID)
	}
	before := reg.Requests()
	app, err := kstate.New(kstate.Topology[string, srOrder, srTotalT]{
		Inputs:       kstate.Topics(in, e.in),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, srOrder, srTotalT] { return &totals{} },
		Output: kstate.Output[string, srTotalT]{
			Topic: e.out,
			Serde: out,
		},
	}, kstate.Options{
		ApplicationID: e.app,
		InstanceID:    "i1",
		Kafka: kstate.KafkaOptions{
			Brokers: e.brokers,
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait:    100 * time.Millisecond,
			MaxRecords: 50,
			// One pipeline: two can both miss the same new schema id at
			// once and ask the registry twice (the count checked below).
			Pipelines: 1,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 10 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := app.RunToEnd(ctx); err != nil {
		t.Fatalf("RunToEnd: %v", err)
	}
	if m := app.Metrics().Total; m.RowsIn != int64(len(recs)) || m.DecodeErrors != 0 {
		t.Fatalf("RowsIn %d DecodeErrors %d, want %d and 0", m.RowsIn, m.DecodeErrors, len(recs))
	}
	// Two writer schemas the application had not seen: two registry calls
	// for 480 records.
	if n := reg.Requests() - before; n != 2 {
		t.Fatalf("%d registry requests while processing, want 2 (one per new writer schema id)", n)
	}

	// Read the output as a foreign consumer: the id from the bytes, the
	// schema from the registry's REST API, then plain Avro decoding.
	got, err := kafka.ReadAll(ctx, e.brokers, e.out)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) == 0 {
		t.Fatal("no output")
	}
	last := map[string]map[string]any{}
	for _, r := range got {
		if len(r.Value) < 5 || r.Value[0] != 0 {
			t.Fatalf("output record %x is not in the wire format", r.Value)
		}
		id := int(binary.BigEndian.Uint32(r.Value[1:5]))
		if id != outID {
			t.Fatalf("output record of schema id %d, want %d", id, outID)
		}
		schema := fetchSchema(t, reg.URL, id)
		var v map[string]any
		if err := avro.Unmarshal(schema, r.Value[5:], &v); err != nil {
			t.Fatalf("decode output %x: %v", r.Value, err)
		}
		if v["customer"] != string(r.Key) {
			t.Fatalf("output keyed %q holds customer %v", r.Key, v["customer"])
		}
		last[string(r.Key)] = v
	}
	if len(last) != customers {
		t.Fatalf("totals for %d customers, want %d", len(last), customers)
	}
	for cust, m := range want {
		v := last[cust]
		if v["orders"] != m.orders || v["cents"] != m.cents || v["currency"] != "EUR" {
			t.Errorf("%s: last total %v, want orders %d cents %d currency EUR", cust, v, m.orders, m.cents)
		}
	}
}

// fetchSchema gets schema id from the registry's REST API, as a consumer in
// another language would, and parses it.
func fetchSchema(t *testing.T, url string, id int) avro.Schema {
	t.Helper()
	req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("%s/schemas/ids/%d", url, id), nil)
	req.SetBasicAuth("app", "secret")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var body struct {
		Schema string `json:"schema"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&body); err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /schemas/ids/%d: %d %v", id, resp.StatusCode, err)
	}
	s, err := avro.ParseWithCache(body.Schema, "", &avro.SchemaCache{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}
