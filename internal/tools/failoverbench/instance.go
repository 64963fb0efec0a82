package main

import (
	"context"
	"flag"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

// instanceArgs are the flags of the instance mode: one kstate application
// instance, a child process of the failover mode (SIGKILL needs a process
// of its own).
type instanceArgs struct {
	Brokers  string
	App      string
	Instance string
	State    string
	In, Out  string
	Session  time.Duration
	// TxnTimeout is Options.Kafka.TransactionTimeout (0: the default).
	TxnTimeout time.Duration
	Leave      bool
}

func (a instanceArgs) argv() []string {
	return []string{"instance", "-brokers", a.Brokers, "-app", a.App, "-instance", a.Instance, "-state", a.State,
		"-in", a.In, "-out", a.Out, "-session-timeout", a.Session.String(), "-txn-timeout", a.TxnTimeout.String(), "-leave=" + strconv.FormatBool(a.Leave)}
}

// instanceMain runs one instance until SIGTERM/SIGINT (graceful stop, exit
// 0) or an error of Run (exit 1).
func instanceMain(args []string) int {
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var a instanceArgs
	fs := flag.NewFlagSet("instance", flag.ContinueOnError)
	fs.StringVar(&a.Brokers, "brokers", "", "bootstrap brokers, comma separated")
	fs.StringVar(&a.App, "app", "", "application id")
	fs.StringVar(&a.Instance, "instance", "", "instance id")
	fs.StringVar(&a.State, "state", "", "state directory")
	fs.StringVar(&a.In, "in", "", "input topic")
	fs.StringVar(&a.Out, "out", "", "output topic")
	fs.DurationVar(&a.Session, "session-timeout", 0, "Options.Kafka.SessionTimeout (0: default)")
	fs.DurationVar(&a.TxnTimeout, "txn-timeout", 0, "Options.Kafka.TransactionTimeout (0: default)")
	fs.BoolVar(&a.Leave, "leave", false, "Options.Kafka.LeaveGroupOnShutdown")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if a.Brokers == "" || a.App == "" || a.State == "" || a.In == "" || a.Out == "" {
		fs.Usage()
		return 2
	}
	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), a.In),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &counter{} },
		Output:       kstate.Output[string, string]{Topic: a.Out, Serde: serde.String()},
	}, kstate.Options{
		ApplicationID: a.App,
		InstanceID:    a.Instance,
		Kafka: kstate.KafkaOptions{
			Brokers:              strings.Split(a.Brokers, ","),
			SessionTimeout:       a.Session,
			TransactionTimeout:   a.TxnTimeout,
			LeaveGroupOnShutdown: a.Leave,
		},
		State: kstate.StateOptions{Dir: a.State},
		// One pipeline: the instance is one member of the group, so that
		// a stopped instance's partitions are exactly one member's.
		Batching: kstate.BatchingOptions{Pipelines: 1, MaxWait: 100 * time.Millisecond},
		Observability: kstate.ObservabilityOptions{
			Logger: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})),
		},
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "failoverbench instance: %v\n", err)
		return 1
	}
	if err := app.Run(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "failoverbench instance: %v\n", err)
		return 1
	}
	return 0
}

// counter counts the rows of each key and emits the running count, "1",
// "2", ... per key: the driver checks that no count is skipped or repeated
// (exactly-once through every failover).
type counter struct{ n state.ValueState[int64] }

func (c *counter) Init(h processor.Handle) (err error) {
	c.n, err = processor.NewValueState(h, "n", state.Int64())
	return err
}

func (c *counter) HandleInputRows(_ string, rows iter.Seq[string], _ processor.TimerValues, out processor.Emitter[string]) error {
	n, _, err := c.n.Get()
	if err != nil {
		return err
	}
	for range rows {
		n++
		if err := out.Emit(strconv.FormatInt(n, 10)); err != nil {
			return err
		}
	}
	return c.n.Update(n)
}

func (c *counter) HandleExpiredTimer(string, processor.TimerValues, processor.ExpiredTimerInfo, processor.Emitter[string]) error {
	return nil
}

func (c *counter) Close() error { return nil }
