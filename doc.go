// Package kstate runs a StatefulProcessor (package processor) as a Kafka
// consumer group with exactly-once micro-batches: the outputs, the state
// changes (changelog records) and the consumer offsets of a batch are
// committed in one Kafka transaction, and only then applied to the
// partition's local RocksDB shard.
//
//	app, err := kstate.New(kstate.Topology[string, string, string]{
//		Inputs:       kstate.Topics(serde.String(), "words"),
//		KeySerde:     serde.String(),
//		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
//		Output:       kstate.Output[string, string]{Topic: "counts", Serde: serde.String()},
//	}, kstate.Options{
//		ApplicationID: "counter",
//		Kafka:         kstate.KafkaOptions{Brokers: []string{"localhost:9092"}},
//	})
//	...
//	err = app.Run(ctx) // blocks; cancel ctx for a graceful shutdown
//
// See Topology for what an application is and Options for how it runs,
// each with every setting and its default, and docs/ARCHITECTURE.md for
// the batch, commit, restore and rebalance protocol.
package kstate
