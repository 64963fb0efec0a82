// Command kafkabroker runs by hand the real Apache Kafka broker that package
// kafka/kafkatest starts for tests: `make kafka-up` starts one in the
// background on 127.0.0.1:9092 and `make kafka-down` stops it. Use it with
// KSTATE_KAFKA_BROKERS=127.0.0.1:9092 to run the integration tests against a
// long-lived broker.
package main

import (
	"context"
	"flag"
	"fmt"
	"log"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kstate/kstate/internal/kafkabroker"
)

func main() {
	port := flag.Int("port", 9092, "client port on 127.0.0.1")
	flag.Parse()
	cache, err := kafkabroker.CacheDir()
	if err != nil {
		log.Fatal(err)
	}
	runDir := filepath.Join(cache, "run")
	pidFile := filepath.Join(runDir, "broker.pid")
	switch flag.Arg(0) {
	case "up":
		if pid, dir, ok := running(pidFile); ok {
			fmt.Printf("kafka already running (pid %d, dir %s)\n", pid, dir)
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
		defer cancel()
		libs, err := kafkabroker.ResolveJars(ctx, log.Printf)
		if err != nil {
			log.Fatal(err)
		}
		b, err := kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{Port: *port, Detached: true}, log.Printf)
		if err != nil {
			log.Fatal(err)
		}
		if err := os.MkdirAll(runDir, 0o755); err != nil {
			log.Fatal(err)
		}
		if err := os.WriteFile(pidFile, []byte(fmt.Sprintf("%d %s\n", b.Pid(), b.Dir)), 0o644); err != nil {
			log.Fatal(err)
		}
		fmt.Printf("kafka up: export KSTATE_KAFKA_BROKERS=%s\n", b.Addr)
	case "down":
		pid, dir, ok := running(pidFile)
		if !ok {
			fmt.Println("kafka not running")
			return
		}
		_ = syscall.Kill(-pid, syscall.SIGTERM)
		for i := 0; i < 150 && syscall.Kill(pid, 0) == nil; i++ {
			time.Sleep(100 * time.Millisecond)
		}
		_ = syscall.Kill(-pid, syscall.SIGKILL)
		_ = os.RemoveAll(dir)
		_ = os.Remove(pidFile)
		fmt.Printf("kafka down (pid %d)\n", pid)
	default:
		fmt.Fprintln(os.Stderr, "usage: kafkabroker [-port N] up|down")
		os.Exit(2)
	}
}

func running(pidFile string) (int, string, bool) {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, "", false
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, "", false
	}
	pid, err := strconv.Atoi(f[0])
	if err != nil || syscall.Kill(pid, 0) != nil {
		return 0, f[1], false
	}
	return pid, f[1], true
}
