package kafkabroker

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate/internal/netproxy"
)

// A Cluster is several real Kafka nodes of one KRaft cluster, each a
// combined broker and controller (process.roles=broker,controller) run
// from the same jars: three JVMs rather than three brokers and a
// controller of its own, on a machine of two cores shared with the
// tests, and a node's death then costs the quorum a voter too, as in the
// small production clusters that run combined nodes. With three voters,
// one node down keeps the quorum.
//
// Every node has three listeners: PLAINTEXT for clients (advertised as
// the node's proxy when ClusterOptions.Proxies is set, so that every
// client connection after the bootstrap goes through it), INTERNAL for
// the brokers' replication (never proxied; advertised as itself, so a
// client that bootstraps from it, as the harness's own admin does,
// bypasses the proxies too) and CONTROLLER for the quorum.
//
// Internal topics and the default for new topics are those of production:
// replication factor 3 (the node count when fewer), min.insync.replicas 2.
type Cluster struct {
	ID    string // the KRaft cluster id
	Dir   string // parent of the nodes' directories
	Nodes []*Node
}

// Node is one broker+controller of a Cluster.
type Node struct {
	ID int32 // node.id (= broker id), 1..n
	// ClientAddr is the address clients are given for this node: its
	// proxy's, or its own client listener's without proxies.
	ClientAddr string
	// ListenerAddr is the node's own client listener (behind the proxy).
	ListenerAddr string
	// InternalAddr is the node's inter-broker listener: a client that
	// bootstraps from it is never proxied (the harness's lookups, a
	// test's verification while a proxy blackholes).
	InternalAddr string
	// Proxy is in front of the client listener; nil without
	// ClusterOptions.Proxies.
	Proxy *netproxy.Proxy

	b *Broker
}

// ClusterOptions tune StartCluster; the zero value is three nodes with
// proxies' ports and the nodes' ports picked free.
type ClusterOptions struct {
	// Nodes is the node count; 0 means 3.
	Nodes int
	// Ports are the client addresses' ports, one per node (the proxies'
	// with Proxies); nil picks free ones.
	Ports []int
	// Proxies puts a netproxy.Proxy in front of every node's client
	// listener and advertises it. The proxies run in this process: not
	// with Detached.
	Proxies bool
	// Detached lets the nodes outlive this process (make kafka-up CLUSTER=3).
	Detached bool
	// FullJIT runs the JVMs as production brokers (see StartOptions).
	FullJIT bool
	// LogDirs gives a node (by id) a log directory of its own instead of
	// one inside its directory: a small filesystem mounted there lets a
	// test fill that node's disk. The directory must exist.
	LogDirs map[int32]string
}

// StartCluster formats and starts the nodes of a new cluster, all at
// once (each waits for a quorum of the others), and returns once every
// node has started.
func StartCluster(ctx context.Context, libs string, o ClusterOptions, logf func(string, ...any)) (*Cluster, error) {
	n := o.Nodes
	if n == 0 {
		n = 3
	}
	switch {
	case n < 1:
		return nil, fmt.Errorf("kafkabroker: ClusterOptions.Nodes is %d, want at least 1", o.Nodes)
	case o.Ports != nil && len(o.Ports) != n:
		return nil, fmt.Errorf("kafkabroker: ClusterOptions.Ports has %d ports for %d nodes", len(o.Ports), n)
	case o.Proxies && o.Detached:
		return nil, errors.New("kafkabroker: ClusterOptions.Proxies and Detached together: the proxies live in this process")
	}
	java, err := exec.LookPath("java")
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: java not found on PATH: %w", err)
	}
	dir, err := os.MkdirTemp("", "kstate-kafka-cluster-")
	if err != nil {
		return nil, err
	}
	c := &Cluster{ID: clusterID(), Dir: dir}
	fail := func(err error) (*Cluster, error) {
		c.Discard()
		return nil, err
	}
	// Per node: the client listener, the inter-broker listener, the
	// controller listener (and the proxy's, picked by netproxy when 0).
	ports, err := freePorts(3*n, o.Ports...)
	if err != nil {
		return fail(err)
	}
	var voters []string
	for i := range n {
		voters = append(voters, fmt.Sprintf("%d@127.0.0.1:%d", i+1, ports[3*i+2]))
	}
	for i := range n {
		node := &Node{ID: int32(i + 1),
			ListenerAddr: fmt.Sprintf("127.0.0.1:%d", ports[3*i]),
			InternalAddr: fmt.Sprintf("127.0.0.1:%d", ports[3*i+1])}
		node.ClientAddr = node.ListenerAddr
		if o.Ports != nil && !o.Proxies {
			// The given port is the node's own client listener.
			node.ListenerAddr = fmt.Sprintf("127.0.0.1:%d", o.Ports[i])
			node.ClientAddr = node.ListenerAddr
		}
		if o.Proxies {
			addr := "127.0.0.1:0"
			if o.Ports != nil {
				addr = fmt.Sprintf("127.0.0.1:%d", o.Ports[i])
			}
			if node.Proxy, err = netproxy.New(addr, node.ListenerAddr); err != nil {
				return fail(err)
			}
			node.ClientAddr = node.Proxy.Addr()
		}
		c.Nodes = append(c.Nodes, node)
	}
	rf := min(n, 3)
	minISR := min(rf, 2)
	start := time.Now()
	checkpoint, err := bootstrapCheckpoint(ctx, java, libs)
	if err != nil {
		return fail(err)
	}
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, node := range c.Nodes {
		wg.Go(func() {
			errs[i] = node.start(ctx, java, libs, dir, c.ID, ports[3*i+2], strings.Join(voters, ","), checkpoint, rf, minISR, o, logf)
		})
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return fail(err)
	}
	took := time.Since(start)
	if err := makeCDSArchive(ctx, java, libs); err != nil {
		logf("%v", err)
	}
	for _, node := range c.Nodes {
		// A restart records no class list again.
		node.b.argv = slices.DeleteFunc(node.b.argv, func(a string) bool { return strings.HasPrefix(a, "-XX:DumpLoadedClassList=") })
	}
	var pids []string
	for _, node := range c.Nodes {
		pids = append(pids, fmt.Sprintf("node %d pid %d at %s", node.ID, node.b.Pid(), node.ClientAddr))
	}
	logf("kafkabroker: started a %d-node Apache Kafka %s cluster (KRaft, combined nodes, replication %d, min ISR %d) in %s: %s; logs in %s",
		n, KafkaVersion, rf, minISR, took.Round(time.Millisecond), strings.Join(pids, ", "), dir)
	return c, nil
}

// nodeConfig is one combined node's server.properties.
func nodeConfig(dir string, node *Node, cport int, voters string, rf, minISR int) string {
	lines := []string{
		"process.roles=broker,controller",
		fmt.Sprintf("node.id=%d", node.ID),
		"controller.quorum.voters=" + voters,
		fmt.Sprintf("listeners=PLAINTEXT://%s,INTERNAL://%s,CONTROLLER://127.0.0.1:%d", node.ListenerAddr, node.InternalAddr, cport),
		fmt.Sprintf("advertised.listeners=PLAINTEXT://%s,INTERNAL://%s", node.ClientAddr, node.InternalAddr),
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=INTERNAL",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
		fmt.Sprintf("default.replication.factor=%d", rf),
		fmt.Sprintf("min.insync.replicas=%d", minISR),
		fmt.Sprintf("offsets.topic.replication.factor=%d", rf),
		fmt.Sprintf("transaction.state.log.replication.factor=%d", rf),
		fmt.Sprintf("transaction.state.log.min.isr=%d", minISR),
	}
	for _, l := range commonConfig(dir) {
		k, _, _ := strings.Cut(l, "=")
		switch k {
		case "offsets.topic.replication.factor", "transaction.state.log.replication.factor", "transaction.state.log.min.isr":
			continue // the cluster's, above
		}
		lines = append(lines, l)
	}
	return strings.Join(lines, "\n")
}

// start writes the node's configuration, formats its storage and starts it.
func (node *Node) start(ctx context.Context, java, libs, parent, clusterID string, cport int, voters, checkpoint string, rf, minISR int, o ClusterOptions, logf func(string, ...any)) error {
	t0 := time.Now()
	dir := filepath.Join(parent, fmt.Sprintf("node-%d", node.ID))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	props := filepath.Join(dir, "server.properties")
	cfg := nodeConfig(dir, node, cport, voters, rf, minISR)
	if ld := o.LogDirs[node.ID]; ld != "" {
		cfg += "\nlog.dirs=" + ld // the last of a key wins
	}
	if err := os.WriteFile(props, []byte(cfg), 0o644); err != nil {
		return err
	}
	logCfg := filepath.Join(dir, "log4j2.yaml")
	if err := os.WriteFile(logCfg, []byte(fmt.Sprintf(log4jConfig, filepath.Join(dir, "server.log"))), 0o644); err != nil {
		return err
	}
	cp := filepath.Join(libs, "*")
	logDir := filepath.Join(dir, "data")
	if ld := o.LogDirs[node.ID]; ld != "" {
		logDir = ld
	}
	if err := formatLogDir(logDir, checkpoint, clusterID, node.ID); err != nil {
		return fmt.Errorf("kafkabroker: node %d: format %s: %w", node.ID, logDir, err)
	}
	jvm := append(jvmArgs(o.FullJIT, logCfg), cdsArgs(libs, node.ID == 1)...)
	formatted := time.Since(t0)
	b := &Broker{Addr: node.ListenerAddr, Dir: dir, argv: append([]string{java}, append(jvm, "-cp", cp, "kafka.Kafka", props)...)}
	b.attr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if o.Detached {
		b.attr = &syscall.SysProcAttr{Setsid: true}
	}
	if err := b.launch(); err != nil {
		return fmt.Errorf("kafkabroker: node %d: %w", node.ID, err)
	}
	node.b = b
	if err := b.waitReady(ctx, 3*time.Minute); err != nil {
		return fmt.Errorf("kafkabroker: node %d did not become ready: %w\n--- its log tail ---\n%s", node.ID, err, b.logTail(30))
	}
	logf("kafkabroker: node %d: storage formatted in %s, started %s later", node.ID, formatted.Round(time.Millisecond), (time.Since(t0) - formatted).Round(time.Millisecond))
	return nil
}

// Bootstrap is the client addresses of every node (the proxies' with
// proxies): what an application under test is given.
func (c *Cluster) Bootstrap() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.ClientAddr)
	}
	return out
}

// DirectBootstrap is the nodes' inter-broker listeners: a client given
// these is never proxied (a test's own checks while it injects faults).
func (c *Cluster) DirectBootstrap() []string {
	var out []string
	for _, n := range c.Nodes {
		out = append(out, n.InternalAddr)
	}
	return out
}

// Node returns the node with broker id id, or nil.
func (c *Cluster) Node(id int32) *Node {
	for _, n := range c.Nodes {
		if n.ID == id {
			return n
		}
	}
	return nil
}

// Pid is the node's process id (of its last start).
func (n *Node) Pid() int { return n.b.Pid() }

// Dir is the node's directory: configuration, data and logs.
func (n *Node) Dir() string { return n.b.Dir }

// Running reports whether the node's process runs.
func (n *Node) Running() bool { return n.b != nil && n.b.Running() }

// Kill ends the node with SIGKILL (a crash) and waits for it to exit; its
// data is kept for Start. Its proxy goes down with it (Proxy.Down):
// clients meet "connection refused", as with the host of a dead broker.
func (n *Node) Kill() {
	n.b.Kill()
	if n.Proxy != nil {
		n.Proxy.Down()
	}
}

// Stop stops the node gracefully (SIGTERM: a controlled shutdown that
// moves its leaderships first) and waits for it to exit; its data is kept
// for Start. Its proxy goes down once the node has exited.
func (n *Node) Stop() {
	n.b.Shutdown()
	if n.Proxy != nil {
		n.Proxy.Down()
	}
}

// Start starts a stopped or killed node again on its data and ports and
// returns once it has started, its proxy up again (once the node listens:
// until then clients are refused, as without a proxy).
func (n *Node) Start(ctx context.Context) error {
	if err := n.b.Restart(ctx); err != nil {
		return fmt.Errorf("node %d: %w", n.ID, err)
	}
	if n.Proxy != nil {
		if err := n.Proxy.Up(); err != nil {
			return fmt.Errorf("node %d: %w", n.ID, err)
		}
	}
	return nil
}

// LogTail is the last lines of the node's logs.
func (n *Node) LogTail(lines int) string { return n.b.logTail(lines) }

// Stop stops every node gracefully, closes the proxies and deletes the
// directories.
func (c *Cluster) Stop() {
	var wg sync.WaitGroup
	for _, n := range c.Nodes {
		if n.b != nil {
			wg.Go(n.b.Shutdown)
		}
	}
	wg.Wait()
	c.Discard()
}

// Discard kills every node at once, closes the proxies and deletes the
// directories (unless KSTATE_KEEP_BROKER_DIR is set).
func (c *Cluster) Discard() {
	for _, n := range c.Nodes {
		if n.b != nil && n.b.cmd != nil {
			n.b.Kill()
		}
		if n.Proxy != nil {
			n.Proxy.Close()
		}
	}
	if os.Getenv("KSTATE_KEEP_BROKER_DIR") == "" {
		_ = os.RemoveAll(c.Dir)
	}
}

// client is a client on the direct listeners of the running nodes.
func (c *Cluster) client() (*kgo.Client, func(), error) {
	var seeds []string
	for _, n := range c.Nodes {
		if n.Running() {
			seeds = append(seeds, n.InternalAddr)
		}
	}
	if len(seeds) == 0 {
		return nil, nil, errors.New("kafkabroker: no node of the cluster runs")
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.RequestTimeoutOverhead(5*time.Second), kgo.RetryTimeout(20*time.Second))
	if err != nil {
		return nil, nil, err
	}
	return cl, cl.Close, nil
}

// admin is a kadm client on the direct listeners of the running nodes.
func (c *Cluster) admin() (*kadm.Client, func(), error) {
	cl, done, err := c.client()
	if err != nil {
		return nil, nil, err
	}
	return kadm.NewClient(cl), done, nil
}

// Leader returns the broker id leading partition p of topic.
func (c *Cluster) Leader(ctx context.Context, topic string, p int32) (int32, error) {
	adm, done, err := c.admin()
	if err != nil {
		return 0, err
	}
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return 0, fmt.Errorf("kafkabroker: metadata of %q: %w", topic, err)
	}
	td, ok := md.Topics[topic]
	if !ok || td.Err != nil {
		return 0, fmt.Errorf("kafkabroker: metadata of %q: %v", topic, td.Err)
	}
	pd, ok := td.Partitions[p]
	if !ok {
		return 0, fmt.Errorf("kafkabroker: %q has no partition %d", topic, p)
	}
	if pd.Err != nil {
		return 0, fmt.Errorf("kafkabroker: partition %d of %q: %w", p, topic, pd.Err)
	}
	return pd.Leader, nil
}

// TxnCoordinator returns the broker id of the transaction coordinator of
// transactional id txnID.
func (c *Cluster) TxnCoordinator(ctx context.Context, txnID string) (int32, error) {
	return c.coordinator(ctx, "transaction", txnID, (*kadm.Client).FindTxnCoordinators)
}

// GroupCoordinator returns the broker id of the coordinator of group.
func (c *Cluster) GroupCoordinator(ctx context.Context, group string) (int32, error) {
	return c.coordinator(ctx, "group", group, (*kadm.Client).FindGroupCoordinators)
}

func (c *Cluster) coordinator(ctx context.Context, kind, key string, find func(*kadm.Client, context.Context, ...string) kadm.FindCoordinatorResponses) (int32, error) {
	adm, done, err := c.admin()
	if err != nil {
		return 0, err
	}
	defer done()
	for {
		r, ok := find(adm, ctx, key)[key]
		switch {
		case !ok:
			return 0, fmt.Errorf("kafkabroker: no %s coordinator answer for %q", kind, key)
		case r.Err == nil:
			return r.NodeID, nil
		case !kerr.IsRetriable(r.Err) || ctx.Err() != nil:
			// Retriable: COORDINATOR_NOT_AVAILABLE while the internal
			// topic is created or moves.
			return 0, fmt.Errorf("kafkabroker: %s coordinator of %q: %w", kind, key, r.Err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ElectPreferredLeaders runs a preferred-leader election for every
// partition of topic (a leader move when the current leader is not the
// preferred replica).
func (c *Cluster) ElectPreferredLeaders(ctx context.Context, topic string) error {
	adm, done, err := c.admin()
	if err != nil {
		return err
	}
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return err
	}
	set := kadm.TopicsSet{}
	set.Add(topic, md.Topics[topic].Partitions.Numbers()...)
	res, err := adm.ElectLeaders(ctx, kadm.ElectPreferredReplica, set)
	if err != nil {
		return fmt.Errorf("kafkabroker: elect preferred leaders of %q: %w", topic, err)
	}
	for _, ps := range res {
		for p, r := range ps {
			// ELECTION_NOT_NEEDED: the preferred replica leads already.
			if r.Err != nil && !strings.Contains(r.Err.Error(), "ELECTION_NOT_NEEDED") {
				return fmt.Errorf("kafkabroker: elect preferred leader of %s/%d: %w", topic, p, r.Err)
			}
		}
	}
	return nil
}

// WaitFullyReplicated waits until every partition of every topic has all
// its replicas in sync and a leader (what an operator checks before the
// next broker of a rolling restart), or ctx ends.
func (c *Cluster) WaitFullyReplicated(ctx context.Context) error {
	adm, done, err := c.admin()
	if err != nil {
		return err
	}
	defer done()
	var last string
	for {
		md, err := adm.Metadata(ctx)
		if err == nil {
			last = ""
			for _, td := range md.Topics {
				for _, pd := range td.Partitions {
					if pd.Leader < 0 || len(pd.ISR) != len(pd.Replicas) {
						last = fmt.Sprintf("%s/%d: leader %d, replicas %v, in sync %v", td.Topic, pd.Partition, pd.Leader, pd.Replicas, pd.ISR)
						break
					}
				}
				if last != "" {
					break
				}
			}
			if last == "" {
				return nil
			}
		} else {
			last = err.Error()
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkabroker: cluster not fully replicated: %s: %w", last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}

// WaitTopic waits until every running node's metadata has topic with
// partitions partitions, each with a leader: a topic just created is
// known to the controller first and to each broker a little later, and a
// client that asks a broker that has not heard yet is told
// UNKNOWN_TOPIC_OR_PARTITION.
func (c *Cluster) WaitTopic(ctx context.Context, topic string, partitions int) error {
	cl, closeCl, err := c.client()
	if err != nil {
		return err
	}
	defer closeCl()
	for _, n := range c.Nodes {
		if !n.Running() {
			continue
		}
		var last string
		for {
			req := kmsg.NewPtrMetadataRequest()
			rt := kmsg.NewMetadataRequestTopic()
			rt.Topic = kmsg.StringPtr(topic)
			req.Topics = append(req.Topics, rt)
			resp, err := req.RequestWith(ctx, cl.Broker(int(n.ID)))
			if err == nil {
				last = fmt.Sprintf("node %d does not know %s yet", n.ID, topic)
				if len(resp.Topics) == 1 && resp.Topics[0].ErrorCode == 0 && len(resp.Topics[0].Partitions) == partitions {
					led := 0
					for _, p := range resp.Topics[0].Partitions {
						if p.ErrorCode == 0 && p.Leader >= 0 {
							led++
						}
					}
					if led == partitions {
						break
					}
					last = fmt.Sprintf("node %d: %d of %d partitions of %s have a leader", n.ID, led, partitions, topic)
				}
			} else {
				last = err.Error()
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("kafkabroker: topic %s not known everywhere: %s: %w", topic, last, ctx.Err())
			case <-time.After(100 * time.Millisecond):
			}
		}
	}
	return nil
}

// Replicas returns the replicas of partition p of topic, the preferred
// leader first.
func (c *Cluster) Replicas(ctx context.Context, topic string, p int32) ([]int32, error) {
	adm, done, err := c.admin()
	if err != nil {
		return nil, err
	}
	defer done()
	md, err := adm.Metadata(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafkabroker: metadata of %q: %w", topic, err)
	}
	pd, ok := md.Topics[topic].Partitions[p]
	if !ok {
		return nil, fmt.Errorf("kafkabroker: %q has no partition %d", topic, p)
	}
	return pd.Replicas, nil
}

// Reassign moves partition p of topic to replicas (an
// AlterPartitionAssignments, as kafka-reassign-partitions.sh does) and
// waits until the reassignment has completed: none in progress, the
// partition's replicas are replicas and all in sync, or ctx ends.
func (c *Cluster) Reassign(ctx context.Context, topic string, p int32, replicas []int32) error {
	adm, done, err := c.admin()
	if err != nil {
		return err
	}
	defer done()
	var req kadm.AlterPartitionAssignmentsReq
	req.Assign(topic, p, replicas)
	res, err := adm.AlterPartitionAssignments(ctx, req)
	if err != nil {
		return fmt.Errorf("kafkabroker: reassign %s/%d to %v: %w", topic, p, replicas, err)
	}
	for _, r := range res.Sorted() {
		if r.Err != nil {
			return fmt.Errorf("kafkabroker: reassign %s/%d to %v: %w", topic, p, replicas, r.Err)
		}
	}
	set := kadm.TopicsSet{}
	set.Add(topic, p)
	var last string
	for {
		last = ""
		ls, err := adm.ListPartitionReassignments(ctx, set)
		switch {
		case err != nil:
			last = err.Error()
		case len(ls.Sorted()) > 0:
			r := ls.Sorted()[0]
			last = fmt.Sprintf("in progress: replicas %v, adding %v, removing %v", r.Replicas, r.AddingReplicas, r.RemovingReplicas)
		default:
			md, err := adm.Metadata(ctx, topic)
			if err != nil {
				last = err.Error()
				break
			}
			pd := md.Topics[topic].Partitions[p]
			if !slices.Equal(pd.Replicas, replicas) || len(pd.ISR) != len(replicas) || pd.Leader < 0 {
				last = fmt.Sprintf("replicas %v, in sync %v, leader %d", pd.Replicas, pd.ISR, pd.Leader)
			}
		}
		if last == "" {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafkabroker: reassignment of %s/%d to %v not complete: %s: %w", topic, p, replicas, last, ctx.Err())
		case <-time.After(250 * time.Millisecond):
		}
	}
}
