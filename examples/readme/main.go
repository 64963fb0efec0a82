// Command readme is the counter of the README, kept here so that it
// compiles and is tested (readme_test.go checks that the README shows these
// files verbatim and that the counter counts).
package main

import (
	"context"
	"log"
	"os"
	"os/signal"
	"syscall"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	app, err := kstate.New(kstate.Topology[string, string, string]{
		Inputs:       kstate.Topics(serde.String(), "words"), // the record key is the grouping key
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
		Output:       kstate.Output[string, string]{Topic: "counts", Serde: serde.String()}, // must exist
	}, kstate.Options{
		ApplicationID: "wordcount", // the consumer group; changelog topic "wordcount-changelog"
		Kafka:         kstate.KafkaOptions{Brokers: []string{"localhost:9092"}},
	})
	if err != nil {
		log.Fatal(err)
	}
	if err := app.Run(ctx); err != nil { // blocks; Ctrl-C or SIGTERM stops it gracefully
		log.Fatal(err)
	}
}
