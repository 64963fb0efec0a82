// Package examples holds runnable kstate applications, one folder each,
// that show the programming model on the embedded Kafka (the default) or on
// a real cluster (--brokers):
//
//   - simplecounter: a ValueState per key (the spec's counter);
//   - initialstate: initial state applied once, on the first run;
//   - sessiontracker: a MapState keyed by session id;
//   - heartbeat: processing-time timers and TTL;
//   - eventtime: event-time timers, the watermark, late rows;
//   - chained: two applications, event time kept through Kafka;
//   - foreachbatch: a foreachBatch sink writing per-key results to SQLite,
//     exactly once by batch id;
//   - schemaregistry: Avro records in the Confluent wire format in and
//     out, across a producer's schema upgrade;
//   - groupby: records keyed by user counted per country, re-keyed through
//     the repartition topic (Topology.GroupBy);
//   - readme: the README's counter, compiled and tested;
//   - integrationtest: a service's integration test on a real Kafka
//     (kafka/kafkatest), to copy into your own service.
//
// Each example's test asserts its exact output; see the README's Examples
// section for a paragraph on each.
package examples
