// Package kstatetest tests a kstate processor without Kafka: a Driver runs
// the application's own kstate.Topology on the real engine — the partition
// tasks, state staging, timers, TTL, watermark and late rows, initial
// state, output event time and the wrapping of processor errors and panics
// are the code kstate.App.Run uses — over in-memory state shards, one
// micro-batch per RunBatch call, synchronously, with a clock the test
// moves. It plays the part Kafka Streams' TopologyTestDriver plays there.
//
// A test queues input, runs a batch, and checks outputs and state:
//
//	d := kstatetest.New(t, top) // top: the kstate.Topology the application ships
//	d.Input("a", "hello")
//	d.Input("a", "world")
//	d.MustRunBatch()
//	got := d.OutputValues()                                  // what went to the output topic
//	n, ok := kstatetest.ValueOf(d, "a", "count", state.Int64()) // committed state of key "a"
//
// Processing-time timers and TTL follow the driver clock: AdvanceClock,
// then RunBatch. Restart closes the processors and restores fresh shards
// from the changelog the driver captured, as a restarted instance would.
//
// Several input topics: InputTo and InputRecordTo queue a record of a
// given input topic (kstate.Topology.Inputs); a batch hands a key's rows of every
// topic to one HandleInputRows call, by topic then in queue order. With
// kstate.Topology.GroupBy a batch forwards the records of a GroupBy input to the
// repartition partition of their new key, and the next RunBatch processes
// them, as on Kafka.
//
// What the driver does not simulate: Kafka itself (rebalances, fencing,
// transaction timeouts, the poll loop's batching of records: each RunBatch
// is one batch of everything queued).
package kstatetest
