package integration

import (
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// outageRe matches the error an instance logs when the broker aborted its
// transaction while the brokers refused its writes (kafka.ErrTxnLostInOutage,
// in the "Kafka unreachable: … rejoining" warning).
var outageRe = regexp.MustCompile(`did not complete within its timeout while the brokers refused or did not answer its writes[^"]*`)

// clusterMinISRLost is TestClusterChaos's case (f): the output topic's
// in-sync replicas fall below its min.insync.replicas for 30 s, three times
// TransactionTimeout (10 s by default): one broker stopped gracefully (the
// controller shrinks the ISR to two at once) while the topic's
// min.insync.replicas is raised to 3. Every write to the output is refused
// with NOT_ENOUGH_REPLICAS, which franz-go retries until the broker aborts
// the transaction for its timeout and bumps the producer's epoch. The
// instances ran and waited throughout, so that fence is the outage's:
// writes stop with the clear error in the log (kafka.ErrTxnLostInOutage),
// no instance stops (before issue #28's fix both stopped as fenced), and
// once the replicas are back the output resumes, exactly once.
func clusterMinISRLost(t *testing.T, c *kafkabroker.Cluster) {
	a := newChaosApp(t, c, "chaos-minisr")
	a.run(t, "min ISR of the output lost for 30 s (one broker stopped, min.insync.replicas 3 of 3)", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		// A broker that coordinates nothing of the application, if
		// there is one: only the output's writes are to fail.
		victim := c.Nodes[0]
		for _, n := range c.Nodes {
			if !strings.Contains(a.roles(t, n.ID), "coordinator") {
				victim = n
				break
			}
		}
		before := 0
		for _, ch := range a.children {
			before += len(ch.findAll(outageRe))
		}
		setTopicConfig(t, a.direct.brokers, a.e.out, "min.insync.replicas", "3")
		t.Logf("stopping node %d (%s); output min.insync.replicas 3", victim.ID, a.roles(t, victim.ID))
		victim.Stop()
		time.Sleep(30 * time.Second)
		for _, ch := range a.children {
			ch.failIfErrored(t) // none stopped as fenced
		}
		var seen []string
		for _, ch := range a.children {
			for _, m := range ch.findAll(outageRe) {
				seen = append(seen, ch.name+": "+m[0])
			}
		}
		if len(seen) <= before {
			t.Errorf("no instance logged the outage (%s) while the output's min ISR was lost", outageRe)
		} else {
			t.Logf("writes stopped with: %s (%d times)", seen[len(seen)-1], len(seen)-before)
		}
		setTopicConfig(t, a.direct.brokers, a.e.out, "min.insync.replicas", "2")
		if err := victim.Start(ctx); err != nil {
			t.Fatal(err)
		}
		waitReplicated(t, c)
	}, 20*time.Second)
}

// setTopicConfig sets one config of topic (incremental AlterConfigs).
func setTopicConfig(t *testing.T, brokers []string, topic, key, value string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	rs, err := kadm.NewClient(cl).AlterTopicConfigs(ctx, []kadm.AlterConfig{{Name: key, Value: &value}}, topic)
	if err == nil {
		for _, r := range rs {
			err = r.Err
		}
	}
	if err != nil {
		t.Fatalf("set %s=%s on %s: %v", key, value, topic, err)
	}
}
