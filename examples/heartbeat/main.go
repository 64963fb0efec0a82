// Command heartbeat runs the heartbeat example: a sensor monitor with
// processing-time timers and TTL (see heartbeat/monitor.go).
//
//	go run ./examples/heartbeat                           # embedded Kafka
//	go run ./examples/heartbeat --brokers localhost:9092  # your cluster
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kstate/kstate/examples/heartbeat/heartbeat"
	"github.com/kstate/kstate/examples/internal/sandbox"
)

func main() {
	brokers := flag.String("brokers", "", "Kafka bootstrap servers, comma-separated (default: an embedded in-process Kafka)")
	stateDir := flag.String("state-dir", "", "directory for the local state shards (default: a temporary directory)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := heartbeat.Run(ctx, sandbox.SplitBrokers(*brokers), *stateDir, os.Stdout); err != nil {
		fmt.Fprintln(os.Stderr, "heartbeat:", err)
		os.Exit(1)
	}
}
