// Command kstate-count is kstate's peer in the peer comparison harness
// (the "stateful count" workload of ../shared/bench-peers, and the heavy
// workload of internal/tools/benchpeers/heavy, run by `make bench-peers`;
// see docs/BENCHMARKS.md). It is a benchmark program, not part of the
// product.
//
// It counts the records of every key of the input topic, exactly-once, in a
// ValueState[int64] with kstate's defaults (RocksDB unless -backend says
// otherwise), and emits for every input record the same key with a 16-byte
// value: the key's count after the record (int64, big-endian) followed by
// the first 8 bytes of the input value (the producer's send time). With
// -processor heavy it keeps instead, per key, a ListState of the last 5
// send times, a MapState of count, sum, min and max, and a processing-time
// timer moved to now + 1 h on every call (heavy.go), and emits the same
// output (the map's count). With -processor big the count is kept in a
// value of -value-bytes bytes (big.go), for state larger than memory.
//
//	kstate-count -brokers 127.0.0.1:9092 -group bench-x -state /tmp/st [-in bench-in] [-out bench-out] [-processor heavy|big] [-value-bytes 200]
//	             [-batch 20000] [-backend pebble] [-set Batching.MaxWait=50ms] [-set Field=value ...] [-compression none] [-cpuprofile f]
//
// A new application reads its input from the earliest offset. SIGTERM or
// SIGINT stop it gracefully (the batch in flight commits, as Run does on a
// cancelled context); it then prints its counters. Flags default to the
// harness's environment ($BROKERS, $APP_ID, $STATE_DIR, $TOPIC_IN,
// $TOPIC_OUT). Once a partition is restored it prints
// "partition P ready in D", which the harness's restore.sh times.
package main

import (
	"context"
	"encoding/binary"
	"errors"
	"flag"
	"fmt"
	"iter"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/optpath"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/state"
)

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "kstate-count:", err)
		os.Exit(1)
	}
}

// options are the command's flags.
type options struct {
	brokers, group, state, in, out string
	processor                      string
	valueBytes                     int
	batch                          int
	backend                        string
	sets                           []string
	logLevel                       string
	cpuProfile                     string
	memProfile                     string
	liveProfile                    string
	liveProfileAt                  time.Duration
	compression                    string
}

func parseFlags(args []string) (options, error) {
	var o options
	fs := flag.NewFlagSet("kstate-count", flag.ContinueOnError)
	fs.StringVar(&o.brokers, "brokers", os.Getenv("BROKERS"), "bootstrap brokers, comma-separated (default $BROKERS)")
	fs.StringVar(&o.group, "group", os.Getenv("APP_ID"), "Options.ApplicationID: the consumer group and transactional id base (default $APP_ID)")
	fs.StringVar(&o.state, "state", os.Getenv("STATE_DIR"), "Options.State.Dir (default $STATE_DIR)")
	fs.StringVar(&o.in, "in", envOr("TOPIC_IN", "bench-in"), "input topic ($TOPIC_IN if set)")
	fs.StringVar(&o.out, "out", envOr("TOPIC_OUT", "bench-out"), "output topic ($TOPIC_OUT if set)")
	fs.StringVar(&o.processor, "processor", "count", "the workload: count (a ValueState count per key), heavy (a list of the last 5 values, a map of 4 aggregates and a processing-time timer per key) or big (count with a -value-bytes state value per key)")
	fs.IntVar(&o.valueBytes, "value-bytes", defaultBigValueBytes, "-processor big: the size of every key's state value in bytes (at least 16)")
	fs.IntVar(&o.batch, "batch", 0, "Options.Batching.MaxRecords (0: kstate's default)")
	fs.StringVar(&o.backend, "backend", "", "Options.State.Backend: rocksdb or pebble (empty: kstate's default)")
	fs.Func("set", "Field=value: set any kstate.Options field of kind string, bool, int, float or time.Duration, named by its path (repeatable), e.g. -set Batching.MaxWait=50ms", func(s string) error {
		o.sets = append(o.sets, s)
		return nil
	})
	fs.StringVar(&o.logLevel, "log", "info", "log level: debug, info, warn, error")
	fs.StringVar(&o.compression, "compression", "", "producer compression: none, snappy, lz4, zstd or gzip (empty: kstate's default, the Kafka client's snappy; the harness's other peers produce uncompressed)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof)")
	fs.StringVar(&o.liveProfile, "liveprofile", "", "write the live heap (in-use objects after a GC) -liveprofile-at into the run to this file (go tool pprof -sample_index=inuse_space), and print the Go runtime's memory then")
	fs.DurationVar(&o.liveProfileAt, "liveprofile-at", 10*time.Second, "when -liveprofile is taken, from the start")
	fs.StringVar(&o.memProfile, "memprofile", "", "write a heap profile at the end of the run to this file (go tool pprof -sample_index=alloc_space or alloc_objects), and print the allocations per input row")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if fs.NArg() > 0 {
		return o, fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	switch {
	case o.brokers == "":
		return o, errors.New("-brokers (or $BROKERS) is required")
	case o.group == "":
		return o, errors.New("-group (or $APP_ID) is required")
	case o.state == "":
		return o, errors.New("-state (or $STATE_DIR) is required")
	case o.processor != "count" && o.processor != "heavy" && o.processor != "big":
		return o, fmt.Errorf("-processor %q: want count, heavy or big", o.processor)
	case o.valueBytes < 16:
		return o, fmt.Errorf("-value-bytes %d: want at least 16 (the count and the send time)", o.valueBytes)
	}
	return o, nil
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// config builds the application's Topology and Options from the flags.
func config(o options, logger *slog.Logger) (kstate.Topology[string, int64, countOut], kstate.Options, error) {
	top := kstate.Topology[string, int64, countOut]{
		Inputs:       kstate.Topics(sendTimeCodec{}, o.in),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, int64, countOut] { return &counter{} },
		Output: kstate.Output[string, countOut]{
			Topic: o.out,
			Serde: outCodec{},
		},
	}
	if o.processor == "heavy" {
		top.NewProcessor = func() processor.StatefulProcessor[string, int64, countOut] { return newHeavy() }
		top.TimeMode = processor.ProcessingTime
	}
	if o.processor == "big" {
		top.NewProcessor = func() processor.StatefulProcessor[string, int64, countOut] {
			return &bigCounter{valueBytes: o.valueBytes}
		}
	}
	opts := kstate.Options{
		ApplicationID: o.group,
		Kafka: kstate.KafkaOptions{
			Brokers: strings.Split(o.brokers, ","),
		},
		State: kstate.StateOptions{
			Dir:     o.state,
			Backend: o.backend,
		},
		Batching: kstate.BatchingOptions{
			MaxRecords: o.batch,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: logger,
		},
	}
	if o.compression != "" {
		c, ok := map[string]kgo.CompressionCodec{"none": kgo.NoCompression(), "snappy": kgo.SnappyCompression(),
			"lz4": kgo.Lz4Compression(), "zstd": kgo.ZstdCompression(), "gzip": kgo.GzipCompression()}[o.compression]
		if !ok {
			return top, opts, fmt.Errorf("-compression %q: want none, snappy, lz4, zstd or gzip", o.compression)
		}
		opts.Kafka.ClientOptions = append(opts.Kafka.ClientOptions, kgo.ProducerBatchCompression(c))
	}
	for _, s := range o.sets {
		if err := setField(&opts, s); err != nil {
			return top, opts, err
		}
	}
	return top, opts, nil
}

// setField sets one field of *opts from -set's "Path=value"
// (internal/optpath).
func setField(opts any, assignment string) error {
	if err := optpath.Set(opts, assignment); err != nil {
		return fmt.Errorf("-set %w", err)
	}
	return nil
}

func run(args []string) error {
	o, err := parseFlags(args)
	if err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	var level slog.Level
	if err := level.UnmarshalText([]byte(o.logLevel)); err != nil {
		return fmt.Errorf("-log %q: %w", o.logLevel, err)
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	top, opts, err := config(o, logger)
	if err != nil {
		return err
	}
	app, err := kstate.New(top, opts)
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}

	start := time.Now()
	done := make(chan struct{})
	go reportReady(app, start, done)
	if o.liveProfile != "" {
		t := time.AfterFunc(o.liveProfileAt, func() {
			if err := writeLiveProfile(o.liveProfile); err != nil {
				fmt.Fprintf(os.Stderr, "kstate-count: -liveprofile: %v\n", err)
			}
		})
		defer t.Stop()
	}
	err = app.Run(ctx)
	close(done)
	m := app.Metrics().Total
	fmt.Fprintf(os.Stderr, "kstate-count: stopped after %v: rows in %d, out %d, batches %d, commits %d, aborts %d, changelog records %d, restored %d\n",
		time.Since(start).Round(time.Millisecond), m.RowsIn, m.RowsOut, m.Batches, m.Commits, m.Aborts, m.ChangelogRecords, m.RestoreRecords)
	if o.memProfile != "" {
		if perr := writeHeapProfile(o.memProfile, m.RowsIn); perr != nil && err == nil {
			err = perr
		}
	}
	return err
}

// reportReady prints "partition P ready in D" once for every partition
// that is assigned and no longer restoring, D counted from the start of
// the process; the harness's restore.sh waits for these lines.
//
// It looks every readyPollFast while an assigned partition has not been
// reported, and every readyPollIdle once all have: App.Metrics snapshots
// every pipeline, and at 200 calls a second for a whole run it cost 5.5 %
// of the process's CPU at 5,000 records/s (a CPU profile of the harness's
// latency mode), which is the harness's, not kstate's.
func reportReady(app *kstate.App[string, int64, countOut], start time.Time, done <-chan struct{}) {
	seen := map[int32]bool{}
	wait := readyPollFast
	for {
		select {
		case <-done:
			return
		case <-time.After(wait):
		}
		m := app.Metrics()
		wait = readyPollIdle
		for _, p := range m.Assigned {
			c, ok := m.Partitions[p]
			if seen[p] {
				continue
			}
			if !ok || slices.Contains(m.Restoring, p) {
				wait = readyPollFast
				continue
			}
			seen[p] = true
			fmt.Fprintf(os.Stderr, "kstate-count: partition %d ready in %v (restored %d changelog records in %v)\n",
				p, time.Since(start).Round(time.Millisecond), c.RestoreRecords, c.RestoreTime.Round(time.Millisecond))
		}
		if len(m.Assigned) == 0 {
			wait = readyPollFast // nothing assigned yet: the start
		}
	}
}

// How often reportReady looks: while a partition is not yet reported, and
// once every assigned one is (a later assignment is seen within
// readyPollIdle, then timed at readyPollFast).
const (
	readyPollFast = 5 * time.Millisecond
	readyPollIdle = 250 * time.Millisecond
)

// counter is the stateful count: one ValueState per key, one output per
// input record.
type counter struct {
	processor.Defaults[string, countOut]

	count state.ValueState[int64]
}

func (c *counter) Init(h processor.Handle) (err error) {
	c.count, err = processor.NewValueState(h, "count", state.Int64())
	return err
}

func (c *counter) HandleInputRows(_ string, rows iter.Seq[int64], _ processor.TimerValues, out processor.Emitter[countOut]) error {
	n, _, err := c.count.Get()
	if err != nil {
		return err
	}
	for sent := range rows {
		n++
		if err := out.Emit(countOut{count: n, sentNs: sent}); err != nil {
			return err
		}
	}
	return c.count.Update(n)
}

// countOut is an output value: the key's count after the record and the
// record's send time.
type countOut struct {
	count, sentNs int64
}

// sendTimeCodec decodes an input value to its first 8 bytes, the send time
// (the rest is padding).
type sendTimeCodec struct{}

func (sendTimeCodec) Deserialize(b []byte) (int64, error) {
	if len(b) < 8 {
		return 0, fmt.Errorf("kstate-count: input value has %d bytes, want at least 8", len(b))
	}
	return int64(binary.BigEndian.Uint64(b)), nil
}

// outCodec writes the harness's 16-byte output value.
type outCodec struct{}

func (outCodec) Serialize(o countOut) ([]byte, error) {
	b := make([]byte, 16)
	binary.BigEndian.PutUint64(b, uint64(o.count))
	binary.BigEndian.PutUint64(b[8:], uint64(o.sentNs))
	return b, nil
}

// writeLiveProfile runs a GC, prints the Go runtime's memory and writes the
// in-use heap profile to path: what the process's Go side holds live at
// that moment (the rest of its RSS is the GC's headroom, up to GOGC, and
// RocksDB's C memory).
func writeLiveProfile(path string) error {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	mb := func(v uint64) float64 { return float64(v) / (1 << 20) }
	rss := "?"
	if b, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "VmRSS:") {
				rss = strings.TrimSpace(strings.TrimPrefix(l, "VmRSS:"))
			}
		}
	}
	fmt.Fprintf(os.Stderr, "kstate-count: live heap %.0f MiB (heap in use %.0f, idle %.0f, released %.0f, from the OS in all %.0f MiB; stacks %.0f MiB), next GC at %.0f MiB; process RSS %s\n",
		mb(ms.HeapAlloc), mb(ms.HeapInuse), mb(ms.HeapIdle), mb(ms.HeapReleased), mb(ms.Sys), mb(ms.StackSys), mb(ms.NextGC), rss)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("heap").WriteTo(f, 0)
}

// writeHeapProfile writes the heap profile (every allocation since the
// start, sampled: -sample_index=alloc_space/alloc_objects) to path and
// prints the process's allocations per input row.
func writeHeapProfile(path string, rows int64) error {
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	per := func(v uint64) float64 { return float64(v) / float64(max(rows, 1)) }
	fmt.Fprintf(os.Stderr, "kstate-count: allocations: %d objects, %d bytes (%.1f objects, %.0f bytes per input row), %d GCs\n",
		ms.Mallocs, ms.TotalAlloc, per(ms.Mallocs), per(ms.TotalAlloc), ms.NumGC)
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}
