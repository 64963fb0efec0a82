package kafkabroker

import (
	"context"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestClusterStartTime starts KSTATE_CLUSTER_STARTS three-node clusters
// (with proxies, as the chaos tests do) one after the other and logs each
// start's duration, the machine's load average and the median: the
// measurement behind docs/RELIABILITY.md's cluster start times. Skipped
// without the variable.
func TestClusterStartTime(t *testing.T) {
	n, _ := strconv.Atoi(os.Getenv("KSTATE_CLUSTER_STARTS"))
	if n <= 0 {
		t.Skip("measurement: run with KSTATE_CLUSTER_STARTS=<starts>")
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Duration(n)*5*time.Minute)
	defer cancel()
	libs, err := ResolveJars(ctx, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	var took []time.Duration
	for i := range n {
		load := loadAvg()
		start := time.Now()
		c, err := StartCluster(ctx, libs, ClusterOptions{Proxies: true}, t.Logf)
		if err != nil {
			t.Fatal(err)
		}
		d := time.Since(start)
		took = append(took, d)
		t.Logf("start %d: %v (load before: %s)", i+1, d.Round(time.Millisecond), load)
		c.Discard()
	}
	slices.Sort(took)
	t.Logf("cluster starts: %v; median %v; load now %s", took, took[len(took)/2].Round(time.Millisecond), loadAvg())
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Join(strings.Fields(string(b))[:3], " ")
}
