// Command eventtime runs the event-time example: one-minute windows per
// sensor closed by event-time timers, with late rows dropped and counted
// (see eventtime/windows.go).
//
//	go run ./examples/eventtime                           # embedded Kafka
//	go run ./examples/eventtime --brokers localhost:9092  # your cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kstate/kstate/examples/eventtime/eventtime"
	"github.com/kstate/kstate/examples/internal/sandbox"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := eventtime.Run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "eventtime:", err)
		os.Exit(1)
	}
}
