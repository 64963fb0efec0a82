// Package kstate runs a StatefulProcessor (package processor) as a Kafka
// consumer group with exactly-once micro-batches: the outputs, the state
// changes (changelog records) and the consumer offsets of a batch are
// committed in one Kafka transaction, and only then applied to the
// partition's local RocksDB shard.
//
//	app, err := kstate.New(kstate.Config[string, string, string]{
//		ApplicationID: "counter",
//		Brokers:       []string{"localhost:9092"},
//		InputTopics:   []string{"words"},
//		KeySerde:      serde.String(),
//		ValueSerde:    serde.String(),
//		OutputTopic:   "counts",
//		OutputSerde:   serde.String(),
//		NewProcessor:  func() processor.StatefulProcessor[string, string, string] { return &Counter{} },
//	})
//	...
//	err = app.Run(ctx) // blocks; cancel ctx for a graceful shutdown
//
// See Config for every setting and its default, and docs/ARCHITECTURE.md
// for the batch, commit, restore and rebalance protocol.
package kstate
