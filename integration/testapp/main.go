// Command testapp runs one kstate application instance with one of the
// SPEC's example processors (internal/testprocs), for tests that need a
// real child process: crash tests kill it with SIGKILL at random points,
// scale tests start and stop several. SIGTERM/SIGINT shut it down
// gracefully (exit 0); an error of Run exits 1.
//
//	go run ./integration/testapp -brokers 127.0.0.1:9092 -app counter \
//	    -instance i1 -state /tmp/s1 -in words -out counts -proc counter
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

func main() {
	var (
		brokers  = flag.String("brokers", "", "bootstrap brokers, comma separated (required)")
		app      = flag.String("app", "", "application id (required)")
		instance = flag.String("instance", "", "instance id (default: kstate's default)")
		dir      = flag.String("state", "", "state directory (required)")
		in       = flag.String("in", "", "input topic (required)")
		out      = flag.String("out", "", "output topic (required)")
		proc     = flag.String("proc", "counter", "processor: counter, sessions, quiet, deadline, expiring")
		batch    = flag.Int("max-batch", 0, "MaxBatchRecords (0: default)")
		metrics  = flag.Duration("metrics", 0, "print a metrics line this often (0: never)")
	)
	flag.Parse()
	if *brokers == "" || *app == "" || *dir == "" || *in == "" || *out == "" {
		flag.Usage()
		os.Exit(2)
	}
	cfg := kstate.Config[string, string, string]{
		ApplicationID:   *app,
		Brokers:         strings.Split(*brokers, ","),
		InstanceID:      *instance,
		InputTopics:     []string{*in},
		KeyCodec:        state.String(),
		ValueCodec:      state.String(),
		OutputTopic:     *out,
		OutputCodec:     state.String(),
		StateDir:        *dir,
		MaxBatchRecords: *batch,
		MaxBatchWait:    100 * time.Millisecond,
		Logf:            log.New(os.Stderr, "", log.LstdFlags|log.Lmicroseconds).Printf,
	}
	switch *proc {
	case "counter":
		cfg.NewProcessor = testprocs.NewCounter
	case "sessions":
		cfg.NewProcessor = testprocs.NewSessions
	case "quiet":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewQuiet(time.Second), processor.ProcessingTime
	case "deadline":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewDeadline(10*time.Millisecond), processor.EventTime
		cfg.EventTime = testprocs.EventTimeOf
	case "expiring":
		cfg.NewProcessor, cfg.TimeMode = testprocs.NewExpiring(10*time.Second), processor.ProcessingTime
	default:
		log.Fatalf("testapp: unknown -proc %q", *proc)
	}
	a, err := kstate.New(cfg)
	if err != nil {
		log.Fatalf("testapp: %v", err)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	var wg sync.WaitGroup
	defer wg.Wait()
	if *metrics > 0 {
		wg.Go(func() {
			t := time.NewTicker(*metrics)
			defer t.Stop()
			for {
				select {
				case <-ctx.Done():
					return
				case <-t.C:
					m := a.Metrics()
					fmt.Printf("metrics assigned=%v restoring=%v rows_in=%d rows_out=%d commits=%d aborts=%d first_commit=%v\n",
						m.Assigned, m.Restoring, m.Total.RowsIn, m.Total.RowsOut, m.Total.Commits, m.Total.Aborts, m.FirstCommit)
				}
			}
		})
	}
	if err := a.Run(ctx); err != nil {
		stop()
		wg.Wait()
		log.Printf("testapp: %v", err)
		os.Exit(1)
	}
	stop()
	m := a.Metrics()
	fmt.Printf("stopped rows_in=%d rows_out=%d commits=%d aborts=%d first_commit=%v\n",
		m.Total.RowsIn, m.Total.RowsOut, m.Total.Commits, m.Total.Aborts, m.FirstCommit)
}
