// Command failoverbench measures what bounds failover on a real Kafka
// broker (issue #27, item 4; docs/BENCHMARKS.md, "Failover and the group
// protocol"):
//
//   - failover: two kstate instances ("a" and "b", child processes of this
//     program, one pipeline each) count steady keyed input; for each
//     session timeout and each event done to "b" — SIGKILL, a graceful stop
//     that stays in the group (LeaveGroupOnShutdown=false, the default), a
//     graceful stop that leaves (true), a restart with the same instance
//     id — it measures, per partition, the longest gap in committed output
//     (read_committed) and the time from the event to the output that ended
//     it, and checks at the end that every key's outputs are its counts
//     1..n, each once (exactly-once through every failover).
//   - protocol: the same broker, a plain franz-go group of -members
//     members: the time from a member joining, a dynamic member leaving,
//     and a static member stopping, to every member holding its
//     partitions (balanced) and consuming each, with the classic protocol
//     (cooperative-sticky, kstate's 10 s session and 3 s heartbeat) and
//     with KIP-848 (kgo.ServerSideBalancer, the broker's uniform assignor).
//
// Without -brokers it starts a broker from the test harness's Apache Kafka
// jars (internal/kafkabroker) and stops it after.
//
//	go run ./internal/tools/failoverbench failover -sessions 6s,10s,30s
//	go run ./internal/tools/failoverbench protocol -members 3 -partitions 6 -repeats 5
package main

import (
	"cmp"
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/kstate/kstate/internal/kafkabroker"
)

func main() {
	if len(os.Args) < 2 {
		usage()
		os.Exit(2)
	}
	switch os.Args[1] {
	case "instance":
		os.Exit(instanceMain(os.Args[2:]))
	case "failover", "protocol":
		ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
		defer stop()
		if err := benchMain(ctx, os.Args[1], os.Args[2:], os.Stdout, os.Stderr); err != nil {
			fmt.Fprintln(os.Stderr, err)
			stop()
			os.Exit(1)
		}
	default:
		usage()
		os.Exit(2)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: failoverbench failover|protocol [flags] (-h for the flags)")
}

// benchMain parses a mode's flags, starts a broker unless -brokers is
// given, runs the mode and prints its table on stdout.
func benchMain(ctx context.Context, mode string, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet(mode, flag.ContinueOnError)
	fs.SetOutput(stderr)
	brokers := fs.String("brokers", "", "bootstrap brokers of a running cluster, comma separated (default: start one from the harness's jars)")
	fo := failoverOptions{Log: stderr}
	po := protocolOptions{Log: stderr}
	var sessions, events, protocols string
	switch mode {
	case "failover":
		fs.StringVar(&sessions, "sessions", "10s,6s,30s", "Options.Kafka.SessionTimeout values, comma separated")
		fs.StringVar(&events, "events", strings.Join(allEvents, ","), "events done to instance b: "+strings.Join(allEvents, ", "))
		fs.IntVar(&fo.Repeats, "repeats", 1, "repetitions of the events per session timeout")
		fs.IntVar(&fo.Partitions, "partitions", 4, "partitions of the input and output topics")
		fs.IntVar(&fo.Keys, "keys", 64, "distinct keys of the input")
		fs.IntVar(&fo.Rate, "rate", 400, "input records/s")
		fs.DurationVar(&fo.TxnTimeout, "txn-timeout", 0, "Options.Kafka.TransactionTimeout of the instances (0: kstate's default; negative: each session timeout)")
		fs.StringVar(&fo.Dir, "dir", "", "directory for the instances' state and logs (default: a temporary one, removed after)")
	case "protocol":
		fs.StringVar(&protocols, "protocols", protoClassic+","+protoConsumer, "group protocols: classic, consumer (KIP-848)")
		fs.IntVar(&po.Members, "members", 3, "members after a join (before a leave)")
		fs.IntVar(&po.Partitions, "partitions", 6, "partitions of the topic")
		fs.IntVar(&po.Repeats, "repeats", 3, "repetitions of join and leave per protocol (interleaved)")
		fs.DurationVar(&po.Heartbeat, "classic-heartbeat", classicHeartbeat, "heartbeat interval of the classic protocol's members (kstate's: a third of the session timeout, at most 3s)")
		fs.BoolVar(&po.Static, "static", true, "also stop a static member once per protocol (waits for the session timeout)")
	}
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("%s: unexpected arguments %q", mode, fs.Args())
	}
	label := *brokers
	if *brokers == "" {
		stop, addr, err := startBroker(ctx, stderr)
		if err != nil {
			return err
		}
		defer stop()
		*brokers, label = addr, "Apache Kafka "+kafkabroker.KafkaVersion+" (harness, 1 node, KRaft)"
	}
	bs := strings.Split(*brokers, ",")
	switch mode {
	case "failover":
		fo.Brokers = bs
		var err error
		if fo.Sessions, err = parseDurations(sessions); err != nil {
			return err
		}
		fo.Events = strings.Split(events, ",")
		if fo.Dir == "" {
			if fo.Dir, err = os.MkdirTemp("", "kstate-failoverbench-"); err != nil {
				return err
			}
			defer os.RemoveAll(fo.Dir)
		}
		rs, err := runFailover(ctx, fo)
		printFailover(stdout, fo, label, rs)
		return err
	default:
		po.Brokers, po.Protocols = bs, strings.Split(protocols, ",")
		rs, err := runProtocol(ctx, po)
		printProtocol(stdout, po, label, rs)
		return err
	}
}

func startBroker(ctx context.Context, log io.Writer) (stop func(), addr string, err error) {
	logf := func(format string, args ...any) { fmt.Fprintf(log, "failoverbench: "+format+"\n", args...) }
	libs, err := kafkabroker.ResolveJars(ctx, logf)
	if err != nil {
		return nil, "", fmt.Errorf("no -brokers and no real broker: %w", err)
	}
	b, err := kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{}, logf)
	if err != nil {
		return nil, "", err
	}
	return b.Stop, b.Addr, nil
}

func parseDurations(s string) ([]time.Duration, error) {
	var ds []time.Duration
	for f := range strings.SplitSeq(s, ",") {
		d, err := time.ParseDuration(strings.TrimSpace(f))
		if err != nil || d <= 0 {
			return nil, fmt.Errorf("bad duration %q in %q", f, s)
		}
		ds = append(ds, d)
	}
	return ds, nil
}

// printFailover prints, per session timeout and event, the median [min–max]
// over the repeats of the longest output gap and of the time from the
// event to the last moved partition's first committed output.
func printFailover(w io.Writer, o failoverOptions, label string, rs []eventResult) {
	txn := "10s (default)"
	if o.TxnTimeout < 0 {
		txn = "= session timeout"
	} else if o.TxnTimeout > 0 {
		txn = o.TxnTimeout.String()
	}
	fmt.Fprintf(w, "failover: %s; 2 instances x 1 pipeline, %d partitions, %d keys, %d records/s, TransactionTimeout %s, %d repeat(s)\n",
		label, o.Partitions, o.Keys, o.Rate, txn, o.Repeats)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "session timeout\tevent (to b)\tb's partitions: longest output gap\tevent → b's partitions' first output\tb's partitions: paused in all\ta's partitions: longest gap")
	for _, s := range o.Sessions {
		for _, ev := range o.Events {
			var gaps, resumes, paused, others []time.Duration
			for _, r := range rs {
				if r.Session == s && r.Event == ev {
					gaps, resumes = append(gaps, r.StoppedGap()), append(resumes, r.StoppedResume())
					paused, others = append(paused, r.StoppedPaused()), append(others, r.OtherGap())
				}
			}
			if len(gaps) > 0 {
				fmt.Fprintf(tw, "%v\t%s\t%v\t%v\t%v\t%v\n", s, ev, statsOf(gaps), statsOf(resumes), statsOf(paused), statsOf(others))
			}
		}
	}
	tw.Flush()
}

func printProtocol(w io.Writer, o protocolOptions, label string, rs []protocolResult) {
	fmt.Fprintf(w, "protocol: %s; plain franz-go group, %d members after a join, %d partitions, %d repeat(s); classic: session %v, heartbeat %v; consumer: the broker's\n",
		label, o.Members, o.Partitions, o.Repeats, classicSession, cmp.Or(o.Heartbeat, classicHeartbeat))
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "protocol\trebalance\tevent → every member holds and consumes its partitions")
	for _, proto := range o.Protocols {
		for _, rb := range []string{rbJoin, rbLeave, rbStaticStop} {
			var ds []time.Duration
			for _, r := range rs {
				if r.Protocol == proto && r.Rebalance == rb {
					ds = append(ds, r.Took)
				}
			}
			if len(ds) > 0 {
				fmt.Fprintf(tw, "%s\t%s\t%v\n", proto, rb, statsOf(ds))
			}
		}
	}
	tw.Flush()
}
