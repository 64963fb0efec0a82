package integration

import (
	"bytes"
	"context"
	"iter"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// int64Counter emits each key's running count as an int64 record value.
type int64Counter struct {
	processor.Defaults[string, int64]
	n state.ValueState[int64]
}

func (c *int64Counter) Init(h processor.Handle) (err error) {
	c.n, err = processor.NewValueState(h, "n", state.Int64())
	return err
}

func (c *int64Counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[int64]) error {
	n, _, err := c.n.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
		if err := out.Emit(n); err != nil {
			return err
		}
	}
	return c.n.Update(n)
}

// TestSerdeInt64ReadByKcat: an int64 output written with serde.Int64 is
// what Kafka's LongDeserializer reads. kcat's "-s value=q" is librdkafka's
// big-endian signed 64-bit deserializer, the same bytes LongSerializer
// writes; a state encoding (order-preserving, sign bit flipped) would read
// as -9223372036854775807 for a count of 1.
func TestSerdeInt64ReadByKcat(t *testing.T) {
	t.Parallel()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (make deps installs it): %v", err)
	}
	e := newSpecEnv(t, 1)
	c := e.config(t, nil)
	app, err := kstate.New(kstate.Topology[string, string, int64]{
		Inputs:       c.Inputs,
		KeySerde:     c.KeySerde,
		NewProcessor: func() processor.StatefulProcessor[string, string, int64] { return &int64Counter{} },
		Output: kstate.Output[string, int64]{
			Topic: c.Output.Topic,
			Serde: serde.Int64(),
		},
	}, kstate.Options{
		ApplicationID: c.ApplicationID,
		InstanceID:    c.InstanceID,
		Kafka: kstate.KafkaOptions{
			Brokers: c.Kafka.Brokers,
		},
		State: kstate.StateOptions{
			Dir: c.State.Dir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: c.Batching.MaxWait,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: c.Timeouts.Shutdown,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: c.Observability.Logger,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	stop := testprocs.Start(t, app)
	testprocs.Produce(t, e.brokers, e.in, "a=x", "a=x", "a=x", "b=x", "b=x")

	ctx, cancel := context.WithTimeout(context.Background(), waitOut)
	defer cancel()
	var lines []string
	for ctx.Err() == nil && len(lines) < 5 {
		read := exec.CommandContext(ctx, kcat, "-b", strings.Join(e.brokers, ","), "-C", "-t", e.out,
			"-o", "beginning", "-e", "-q", "-s", "value=q", "-f", "%k=%s\n")
		var stdout, stderr bytes.Buffer
		read.Stdout, read.Stderr = &stdout, &stderr
		if err := read.Run(); err != nil {
			t.Fatalf("kcat consume: %v\n%s", err, stderr.String())
		}
		lines = strings.Fields(stdout.String())
		if len(lines) < 5 {
			time.Sleep(100 * time.Millisecond)
		}
	}
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}
	if want := []string{"a=1", "a=2", "a=3", "b=1", "b=2"}; !slices.Equal(lines, want) {
		t.Fatalf("kcat -s value=q read %v, want %v", lines, want)
	}
	t.Logf("kcat read kstate's serde.Int64 output as Kafka longs: %v", lines)
}
