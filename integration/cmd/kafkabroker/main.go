// Command kafkabroker runs by hand the real Apache Kafka broker that package
// kafka/kafkatest starts for tests, and creates topics on it:
//
//	go run ./integration/cmd/kafkabroker [-port N] up      # make kafka-up
//	go run ./integration/cmd/kafkabroker -cluster 3 up    # make kafka-up CLUSTER=3
//	go run ./integration/cmd/kafkabroker [-port N] down    # make kafka-down
//	go run ./integration/cmd/kafkabroker [-port N] topic create NAME [-partitions N] [-compact]
//	go run ./integration/cmd/kafkabroker [-port N] topic list
//	go run ./integration/cmd/kafkabroker [-port N] topic delete NAME
//
// up starts one broker in the background on 127.0.0.1:9092 (-port picks
// another client port), with transactions enabled for one broker; with
// -cluster 3, three brokers of one KRaft cluster on 9092, 9093 and 9094
// (replication factor 3, min.insync.replicas 2); down stops them and
// deletes their data. topic talks to 127.0.0.1:<port>, or to the
// brokers of -brokers (comma-separated). Use the broker with
// KSTATE_KAFKA_BROKERS=127.0.0.1:9092 to run the integration tests against a
// long-lived broker.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/kafkabroker"
)

const usage = `usage: kafkabroker [-port N] [-cluster N] [-brokers host:port,...] COMMAND

Runs the real Apache Kafka broker of kstate's tests (jars from Maven Central,
cached in ~/.cache/kstate or $KSTATE_CACHE_DIR) and creates topics on it.

Commands:
  up                      start a broker in the background on 127.0.0.1:PORT
                          (make kafka-up); transactions work on one broker;
                          with -cluster N, N brokers of one KRaft cluster on
                          PORT, PORT+1, ... (make kafka-up CLUSTER=3):
                          replication factor 3 and min.insync.replicas 2 for
                          new and internal topics
  down                    stop it (or them) and delete the data (make kafka-down)
  topic create NAME [-partitions N] [-compact] [-config key=value ...]
                          create a topic (the brokers' default replication
                          factor: 1 on one broker, 3 on a cluster; -compact
                          sets cleanup.policy=compact) (make kafka-topic)
  topic list              list the topics with their partition counts
  topic delete NAME       delete a topic

Flags (before the command):
`

func main() {
	fs := flag.NewFlagSet("kafkabroker", flag.ExitOnError)
	port := fs.Int("port", 9092, "client port on 127.0.0.1 (up starts the broker there; topic connects there)")
	brokers := fs.String("brokers", "", "topic: comma-separated brokers to talk to instead of 127.0.0.1:PORT")
	clusterN := fs.Int("cluster", 1, "up: the number of brokers (1, or 3 for a cluster: KRaft, each broker a controller too)")
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), usage)
		fs.PrintDefaults()
	}
	_ = fs.Parse(os.Args[1:])
	cache, err := kafkabroker.CacheDir()
	if err != nil {
		log.Fatal(err)
	}
	runDir := filepath.Join(cache, "run")
	pidFile := filepath.Join(runDir, "broker.pid")
	switch fs.Arg(0) {
	case "up":
		if procs, ok := running(pidFile); ok {
			fmt.Printf("kafka already running (%s)\n", procs)
			return
		}
		if *clusterN < 1 {
			fmt.Fprintf(os.Stderr, "kafkabroker: -cluster %d: want 1 or more brokers\n", *clusterN)
			os.Exit(2)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		libs, err := kafkabroker.ResolveJars(ctx, log.Printf)
		if err != nil {
			log.Fatal(err)
		}
		var procs pidList
		var addrs []string
		if *clusterN == 1 {
			b, err := kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{Port: *port, Detached: true}, log.Printf)
			if err != nil {
				log.Fatal(err)
			}
			procs, addrs = pidList{{b.Pid(), b.Dir}}, []string{b.Addr}
		} else {
			var ports []int
			for i := range *clusterN {
				ports = append(ports, *port+i)
			}
			c, err := kafkabroker.StartCluster(ctx, libs, kafkabroker.ClusterOptions{Nodes: *clusterN, Ports: ports, Detached: true}, log.Printf)
			if err != nil {
				log.Fatal(err)
			}
			for _, n := range c.Nodes {
				procs = append(procs, proc{n.Pid(), c.Dir})
			}
			addrs = c.Bootstrap()
		}
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(pidFile, []byte(procs.encode()), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("kafka up: export KSTATE_KAFKA_BROKERS=%s\n", strings.Join(addrs, ","))
	case "down":
		procs, ok := running(pidFile)
		if !ok {
			fmt.Println("kafka not running")
			return
		}
		for _, p := range procs {
			_ = syscall.Kill(-p.pid, syscall.SIGTERM)
		}
		for _, p := range procs {
			for i := 0; i < 300 && syscall.Kill(p.pid, 0) == nil; i++ {
				time.Sleep(100 * time.Millisecond)
			}
			_ = syscall.Kill(-p.pid, syscall.SIGKILL)
		}
		for _, p := range procs {
			_ = os.RemoveAll(p.dir)
		}
		_ = os.Remove(pidFile)
		fmt.Printf("kafka down (%s)\n", procs)
	case "topic":
		addrs := []string{"127.0.0.1:" + strconv.Itoa(*port)}
		if *brokers != "" {
			addrs = strings.Split(*brokers, ",")
		}
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if err := topicCmd(ctx, addrs, fs.Args()[1:], os.Stdout); err != nil {
			fmt.Fprintln(os.Stderr, "kafkabroker topic:", err)
			if errors.Is(err, errUsage) {
				fs.Usage()
				os.Exit(2)
			}
			os.Exit(1)
		}
	default:
		fs.Usage()
		os.Exit(2)
	}
}

var errUsage = errors.New("bad usage")

// configFlag collects repeated -config key=value flags.
type configFlag map[string]*string

func (c configFlag) String() string { return "" }

func (c configFlag) Set(s string) error {
	k, v, ok := strings.Cut(s, "=")
	if !ok || k == "" {
		return fmt.Errorf("%q is not key=value", s)
	}
	c[k] = &v
	return nil
}

// topicCmd runs "topic create|list|delete" against brokers.
func topicCmd(ctx context.Context, brokers []string, args []string, out io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("%w: topic create|list|delete", errUsage)
	}
	fs := flag.NewFlagSet("topic "+args[0], flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	partitions := fs.Int("partitions", 1, "partition count")
	compact := fs.Bool("compact", false, "cleanup.policy=compact")
	configs := configFlag{}
	fs.Var(configs, "config", "topic config key=value (repeatable)")
	// Flags may come before or after NAME.
	var names []string
	rest := args[1:]
	for {
		if err := fs.Parse(rest); err != nil {
			return fmt.Errorf("%w: %v", errUsage, err)
		}
		if fs.NArg() == 0 {
			break
		}
		names = append(names, fs.Arg(0))
		rest = fs.Args()[1:]
	}
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)
	switch args[0] {
	case "create":
		if len(names) != 1 {
			return fmt.Errorf("%w: topic create NAME [-partitions N] [-compact]", errUsage)
		}
		if *partitions < 1 {
			return fmt.Errorf("%w: -partitions must be at least 1, not %d", errUsage, *partitions)
		}
		if *compact {
			c := "compact"
			configs["cleanup.policy"] = &c
		}
		res, err := adm.CreateTopic(ctx, int32(*partitions), -1, configs, names[0])
		if err == nil {
			err = res.Err
		}
		if err != nil {
			return fmt.Errorf("create %q on %s: %w", names[0], strings.Join(brokers, ","), err)
		}
		fmt.Fprintf(out, "created topic %s (%d partitions%s)\n", names[0], *partitions, map[bool]string{true: ", compacted"}[*compact])
	case "delete":
		if len(names) != 1 {
			return fmt.Errorf("%w: topic delete NAME", errUsage)
		}
		res, err := adm.DeleteTopic(ctx, names[0])
		if err == nil {
			err = res.Err
		}
		if err != nil {
			return fmt.Errorf("delete %q on %s: %w", names[0], strings.Join(brokers, ","), err)
		}
		fmt.Fprintf(out, "deleted topic %s\n", names[0])
	case "list":
		if len(names) != 0 {
			return fmt.Errorf("%w: topic list", errUsage)
		}
		td, err := adm.ListTopics(ctx)
		if err != nil {
			return fmt.Errorf("list topics on %s: %w", strings.Join(brokers, ","), err)
		}
		names := td.Names()
		sort.Strings(names)
		for _, n := range names {
			fmt.Fprintf(out, "%s\t%d\n", n, len(td[n].Partitions))
		}
	default:
		return fmt.Errorf("%w: unknown topic command %q (create, list, delete)", errUsage, args[0])
	}
	return nil
}

// proc is one broker process started by up, and the directory to delete.
type proc struct {
	pid int
	dir string
}

// pidList is the pid file's content: one "pid dir" line per broker.
type pidList []proc

func (l pidList) encode() string {
	var b strings.Builder
	for _, p := range l {
		fmt.Fprintf(&b, "%d %s\n", p.pid, p.dir)
	}
	return b.String()
}

func (l pidList) String() string {
	var s []string
	for _, p := range l {
		s = append(s, fmt.Sprintf("pid %d", p.pid))
	}
	return strings.Join(s, ", ") + ", dir " + l[0].dir
}

// running reads the pid file; ok if any of its brokers still runs.
func running(pidFile string) (pidList, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil, false
	}
	var l pidList
	alive := false
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		if len(f) != 2 {
			continue
		}
		pid, err := strconv.Atoi(f[0])
		if err != nil {
			continue
		}
		l = append(l, proc{pid, f[1]})
		alive = alive || syscall.Kill(pid, 0) == nil
	}
	return l, alive && len(l) > 0
}
