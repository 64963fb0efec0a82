package kafkabroker

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// testCluster starts a three-node cluster with proxies for t, or skips
// unless KSTATE_CLUSTER is set (make test-cluster): three JVMs.
func testCluster(t *testing.T) *Cluster {
	t.Helper()
	if os.Getenv("KSTATE_CLUSTER") == "" {
		t.Skip("cluster test: run with KSTATE_CLUSTER=1 (make test-cluster)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	libs, err := ResolveJars(ctx, t.Logf)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("SKIPPED LOUDLY: no Kafka jars: %v", err)
	}
	start := time.Now()
	c, err := StartCluster(ctx, libs, ClusterOptions{Proxies: true}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("cluster started in %v", time.Since(start).Round(time.Millisecond))
	t.Cleanup(c.Discard)
	return c
}

// TestCluster: three nodes of one cluster, the clients' connections
// through the proxies, topics replicated 3 with min ISR 2 by default, the
// coordinators found, and a transaction committed with the transaction
// coordinator's node killed, then that node back.
func TestCluster(t *testing.T) {
	c := testCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	adm, done, err := c.admin()
	if err != nil {
		t.Fatal(err)
	}
	defer done()
	brokers, err := adm.ListBrokers(ctx)
	if err != nil || len(brokers) != 3 {
		t.Fatalf("brokers %v (%v), want 3", brokers, err)
	}
	const topic = "cluster-test"
	if r, err := adm.CreateTopic(ctx, 3, -1, nil, topic); err != nil || r.Err != nil {
		t.Fatalf("create topic: %v %v", err, r.Err)
	}
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		t.Fatal(err)
	}
	for p, pd := range md.Topics[topic].Partitions {
		if len(pd.Replicas) != 3 {
			t.Fatalf("partition %d: replicas %v, want 3 (default.replication.factor)", p, pd.Replicas)
		}
	}
	// A broker answers for a topic's configs once it has the topic's
	// metadata: poll.
	for mi := ""; mi != "2"; {
		cfgs, err := adm.DescribeTopicConfigs(ctx, topic)
		if err == nil {
			if v, err := cfgs.On(topic, nil); err == nil {
				mi = configValue(v, "min.insync.replicas")
			}
		}
		if ctx.Err() != nil {
			t.Fatalf("min.insync.replicas of a new topic is %q (%v), want 2", mi, err)
		}
		time.Sleep(200 * time.Millisecond)
	}

	// A transaction through the proxies.
	const txnID = "cluster-test-txn"
	produce := func(value string) {
		t.Helper()
		cl, err := kgo.NewClient(kgo.SeedBrokers(c.Bootstrap()...), kgo.TransactionalID(txnID), kgo.DefaultProduceTopic(topic),
			kgo.RecordPartitioner(kgo.ManualPartitioner()))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		if err := cl.BeginTransaction(); err != nil {
			t.Fatal(err)
		}
		for p := range int32(3) {
			if err := cl.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte(value)}).FirstErr(); err != nil {
				t.Fatalf("produce %q to partition %d: %v", value, p, err)
			}
		}
		if err := cl.EndTransaction(ctx, kgo.TryCommit); err != nil {
			t.Fatalf("commit %q: %v", value, err)
		}
	}
	produce("one")
	for _, n := range c.Nodes {
		if n.Proxy.Stats().Accepted == 0 {
			t.Errorf("node %d: its proxy carried no connection", n.ID)
		}
	}
	coord, err := c.TxnCoordinator(ctx, txnID)
	if err != nil || c.Node(coord) == nil {
		t.Fatalf("transaction coordinator %d: %v", coord, err)
	}
	if g, err := c.GroupCoordinator(ctx, "some-group"); err != nil || c.Node(g) == nil {
		t.Fatalf("group coordinator %d: %v", g, err)
	}
	lead, err := c.Leader(ctx, topic, 0)
	if err != nil || c.Node(lead) == nil {
		t.Fatalf("leader of partition 0: %d, %v", lead, err)
	}

	// The coordinator's node crashes: the transaction state log (RF 3,
	// min ISR 2) moves to another node and transactions go on.
	t.Logf("killing node %d, the transaction coordinator", coord)
	c.Node(coord).Kill()
	produce("two")
	coord2, err := c.TxnCoordinator(ctx, txnID)
	if err != nil || coord2 == coord {
		t.Fatalf("transaction coordinator after the kill of node %d: %d, %v", coord, coord2, err)
	}
	if err := c.Node(coord).Start(ctx); err != nil {
		t.Fatal(err)
	}
	produce("three")

	// read_committed: every partition holds one, two, three.
	cl, err := kgo.NewClient(kgo.SeedBrokers(c.DirectBootstrap()...), kgo.ConsumeTopics(topic),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	got := map[int32][]string{}
	for n := 0; n < 9; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("read %d of 9 records: %v", n, got)
		}
		fs.EachRecord(func(r *kgo.Record) { got[r.Partition] = append(got[r.Partition], string(r.Value)); n++ })
	}
	for p := range int32(3) {
		if g := got[p]; len(g) != 3 || g[0] != "one" || g[1] != "two" || g[2] != "three" {
			t.Fatalf("partition %d: %v, want [one two three]", p, g)
		}
	}
}

func configValue(rc kadm.ResourceConfig, key string) string {
	for _, c := range rc.Configs {
		if c.Key == key {
			return c.MaybeValue()
		}
	}
	return ""
}
