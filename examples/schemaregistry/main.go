// Command schemaregistry reads an Avro topic written in the Confluent wire
// format (magic byte, schema id, Avro body), as Confluent's
// KafkaAvroSerializer writes it, sums each customer's orders, and writes
// the totals as Avro in the same format, with the serdes of package
// serde/schemaregistry. The producers move from version 1 of the order
// schema to version 2 between two rounds; the application reads both with
// its own (reader) version.
//
// Round 1 (schema v1): alice 300, bob 150, alice 200 gives alice=500 bob=150.
// Round 2 (schema v2, a coupon field added): bob 50, carol 999 gives
// alice=500 bob=200 carol=999.
//
//	go run ./examples/schemaregistry        # embedded Kafka, a stand-in registry
//	go run ./examples/schemaregistry --brokers localhost:9092 --registry http://localhost:8081
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"iter"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/examples/internal/sandbox"
	"github.com/kstate/kstate/internal/srtest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/serde/schemaregistry"
	"github.com/kstate/kstate/state"
)

// What the producers write: version 1, then version 2 with a coupon.
const orderV1 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"item","type":"string"},{"name":"cents","type":"int"}]}`
const orderV2 = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"item","type":"string"},{"name":"cents","type":"int"},
	{"name":"coupon","type":"string","default":""}]}`

// What the application reads: only cents, widened to long.
const orderApp = `{"type":"record","name":"Order","namespace":"shop","fields":[
	{"name":"cents","type":"long"}]}`

const totalSchema = `{"type":"record","name":"Total","namespace":"shop","fields":[
	{"name":"orders","type":"long"},{"name":"cents","type":"long"}]}`

type OrderV1 struct {
	Item  string `avro:"item"`
	Cents int32  `avro:"cents"`
}

type OrderV2 struct {
	Item   string `avro:"item"`
	Cents  int32  `avro:"cents"`
	Coupon string `avro:"coupon"`
}

type Order struct {
	Cents int64 `avro:"cents"`
}

type Total struct {
	Orders int64 `avro:"orders"`
	Cents  int64 `avro:"cents"`
}

// Summer sums each customer's orders and emits the new Total once per batch.
type Summer struct {
	processor.Defaults[string, Total]

	total state.ValueState[Total]
}

func (s *Summer) Init(h processor.Handle) (err error) {
	s.total, err = processor.NewValueState(h, "total", state.JSON[Total]())
	return err
}

func (s *Summer) HandleInputRows(_ string, rows iter.Seq[Order], _ processor.TimerValues, out processor.Emitter[Total]) error {
	t, _, err := s.total.Get()
	if err != nil {
		return err
	}
	for o := range rows {
		t.Orders++
		t.Cents += o.Cents
	}
	if err := s.total.Update(t); err != nil {
		return err
	}
	return out.Emit(t)
}

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	registry := flag.String("registry", "", "schema registry URL (default: an in-process stand-in)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, sandbox.SplitBrokers(*brokers), *registry, *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "schemaregistry:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, brokers []string, registryURL, stateDir string, out io.Writer) (err error) {
	if registryURL == "" {
		reg := srtest.New(srtest.Options{}) // a stand-in: register, look up, schema by id
		defer reg.Close()
		registryURL = reg.URL
	}
	env, err := sandbox.Open(brokers, stateDir)
	if err != nil {
		return err
	}
	defer env.Close()
	orders, totals := env.Name("orders"), env.Name("totals")
	if err := env.CreateTopics(ctx, 3, orders, totals); err != nil {
		return err
	}
	reg, err := schemaregistry.NewClient(schemaregistry.Config{URLs: []string{registryURL}})
	if err != nil {
		return err
	}
	// Producers register their schema as Confluent's serializers do by
	// default. In production a schema pipeline registers schemas and
	// clients leave AutoRegister off: they only look them up.
	register := schemaregistry.Options{Topic: orders, AutoRegister: true}
	v1, err := schemaregistry.Avro[OrderV1](ctx, reg, orderV1, register)
	if err != nil {
		return err
	}
	in, err := schemaregistry.Avro[Order](ctx, reg, orderApp, register)
	if err != nil {
		return err
	}
	outSerde, err := schemaregistry.Avro[Total](ctx, reg, totalSchema, schemaregistry.Options{Topic: totals, AutoRegister: true})
	if err != nil {
		return err
	}

	app, err := kstate.New(kstate.Topology[string, Order, Total]{
		Inputs:       kstate.Topics(in, orders),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, Order, Total] { return &Summer{} },
		Output: kstate.Output[string, Total]{
			Topic: totals,
			Serde: outSerde,
		},
	}, env.Options("schemaregistry"))
	if err != nil {
		return err
	}
	running, stop := sandbox.Start(ctx, app)
	defer func() {
		if serr := stop(); err == nil {
			err = serr
		}
	}()

	latest := map[string]Total{}
	var bob []byte
	want := int64(0)
	round := func(name string, write func() (int, error)) error {
		n, err := write()
		if err != nil {
			return err
		}
		want += int64(n)
		// Summed once the customers' order counts on the output topic add
		// up to every order produced (the processor's metrics count a row
		// before its batch's output is visible to a read_committed reader).
		_, err = sandbox.AwaitFunc(running, env, totals, serde.String(), serde.Bytes(), "the orders summed",
			func(recs []sandbox.Row[string, []byte]) (bool, error) {
				clear(latest)
				for _, r := range recs {
					t, err := outSerde.Deserialize(r.Value)
					if err != nil {
						return false, err
					}
					latest[r.Key] = t
					if r.Key == "bob" {
						bob = r.Value
					}
				}
				orders := int64(0)
				for _, t := range latest {
					orders += t.Orders
				}
				return orders >= want, nil
			})
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "%s\nout  %s\n     bob's output record: % x (magic byte, schema id %d, Avro)\n", name, format(latest), bob, outSerde.SchemaID())
		return nil
	}
	err = round("in   v1 (schema id "+fmt.Sprint(v1.SchemaID())+"): alice 300, bob 150, alice 200", func() (int, error) {
		return 3, sandbox.Produce(running, env, orders, serde.String(), serde.Serde[OrderV1](v1),
			sandbox.KV("alice", OrderV1{"tea", 300}), sandbox.KV("bob", OrderV1{"pen", 150}), sandbox.KV("alice", OrderV1{"cup", 200}))
	})
	if err != nil {
		return err
	}
	// The producers upgrade: version 2 is registered, a new schema id.
	v2, err := schemaregistry.Avro[OrderV2](ctx, reg, orderV2, register)
	if err != nil {
		return err
	}
	return round("in   v2 (schema id "+fmt.Sprint(v2.SchemaID())+"): bob 50 (coupon SPRING), carol 999", func() (int, error) {
		return 2, sandbox.Produce(running, env, orders, serde.String(), serde.Serde[OrderV2](v2),
			sandbox.KV("bob", OrderV2{"ink", 50, "SPRING"}), sandbox.KV("carol", OrderV2{"lamp", 999, ""}))
	})
}

// format prints totals as "alice=500 (2) bob=150 (1)", sorted by customer.
func format(totals map[string]Total) string {
	var kv []string
	for k, t := range totals {
		kv = append(kv, fmt.Sprintf("%s=%d (%d)", k, t.Cents, t.Orders))
	}
	slices.Sort(kv)
	return strings.Join(kv, " ")
}
