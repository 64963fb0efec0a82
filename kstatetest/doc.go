// Package kstatetest tests a kstate application without Kafka: a Driver
// runs the application's own kstate.Topology as the App that kstate.New
// builds, through App.Run's own code — the coordinator with its planned
// batches and sinks, overlapped produce, restores, initial state, dead
// letters, several inputs, GroupBy, and the mapping to the errors Run
// returns — over an in-memory Kafka (topics, transactions, a consumer
// group) and in-memory state shards, with a clock the test moves. Each
// call returns once the application is idle, and nothing sleeps: tests
// are deterministic. It plays the part Kafka Streams' TopologyTestDriver
// plays there, on the real runtime.
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
// then RunBatch. Restart stops the application and runs it again, its
// shards restored from the changelog, as a restarted instance would.
//
// Several input topics: InputTo and InputRecordTo queue a record of a
// given input topic (Topology.Inputs); a batch hands a key's rows of every
// topic to one HandleInputRows call, by topic then in queue order. With
// Topology.GroupBy a batch forwards the records of a GroupBy input to the
// repartition partition of their new key, and the next RunBatch processes
// them, as on Kafka.
//
// Failures on purpose, on the real coordinator: Crash kills the
// application at a named point of the commit or restore protocol (then
// Restart); FailNextCommit aborts the next transaction; Fence has a newer
// instance take over during the next batch; Rebalance moves partitions
// between two instances of the application; FailNextSink fails the next
// sink call; StuckNextCall blocks the next processor call for a key until
// the engine gives the batch up at MaxBatchDuration. A test checks that the outputs and the state are exactly
// those of a run without the failure.
//
// What the driver does not simulate: the network and the broker's own
// failures beyond these (unreachable brokers, lost commit answers), the
// poll loop's batching of records (each RunBatch is one batch of
// everything queued), and Kafka's timeouts.
package kstatetest
