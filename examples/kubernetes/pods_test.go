package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// runMainEnv, set to 1, makes the test binary run the program's main
// instead of the tests: a pod's process.
const runMainEnv = "PAGEVIEWS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits 1 on an error
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// queryToken is the test pods' KSTATE_QUERY_TOKEN.
const queryToken = "s3cret"

// testKafka is the Kafka of the pod tests: the embedded one, or with
// KSTATE_KAFKA_BROKERS set a real broker's (`make kafka-up`), on which
// the topics and the application id get names of their own.
type testKafka struct {
	brokers []string
	real    bool
	// names are the KSTATE_INPUT_TOPIC, KSTATE_OUTPUT_TOPIC and
	// KSTATE_APPLICATION_ID to use.
	names map[string]string
}

// startKafka returns the test's Kafka with the input and output topics of
// the ConfigMap, of partitions partitions each.
func startKafka(t *testing.T, d deployment, partitions int) testKafka {
	t.Helper()
	k := testKafka{names: map[string]string{}}
	for _, v := range []string{"KSTATE_INPUT_TOPIC", "KSTATE_OUTPUT_TOPIC", "KSTATE_APPLICATION_ID"} {
		k.names[v] = d.cm.Data[v]
	}
	if real := strings.TrimSpace(os.Getenv("KSTATE_KAFKA_BROKERS")); real != "" {
		k.brokers, k.real = strings.Split(real, ","), true
		var b [4]byte
		_, _ = rand.Read(b[:])
		for v, n := range k.names {
			k.names[v] = n + "-" + hex.EncodeToString(b[:])
		}
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
		if err != nil {
			t.Fatal(err)
		}
		defer cl.Close()
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if _, err := kadm.NewClient(cl).CreateTopics(ctx, int32(partitions), -1, nil, k.names["KSTATE_INPUT_TOPIC"], k.names["KSTATE_OUTPUT_TOPIC"]); err != nil {
			t.Fatal(err)
		}
		t.Logf("on the real broker at %s, application %s", real, k.names["KSTATE_APPLICATION_ID"])
		return k
	}
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{k.names["KSTATE_INPUT_TOPIC"]: partitions, k.names["KSTATE_OUTPUT_TOPIC"]: partitions}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	k.brokers = e.Brokers()
	return k
}

// testPodEnv is the environment the manifests give pod name, with what
// differs in a test: the test Kafka's address and names, a state
// directory of its own, free local ports (advertised as its query URL),
// the token.
func testPodEnv(t *testing.T, d deployment, name string, k testKafka) map[string]string {
	t.Helper()
	env, errs := podEnv(d, d.sts.Spec.Template.Spec.Containers[0], name, "default")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	freeAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	env["KSTATE_BROKERS"] = strings.Join(k.brokers, ",")
	for v, n := range k.names {
		env[v] = n
	}
	env["KSTATE_STATE_DIR"] = t.TempDir()
	env["KSTATE_HTTP_ADDR"], env["KSTATE_QUERY_ADDR"] = freeAddr(), freeAddr()
	env["KSTATE_ADVERTISED_URL"] = "http://" + env["KSTATE_QUERY_ADDR"]
	env["KSTATE_QUERY_TOKEN"] = queryToken
	env["KSTATE_LOG_LEVEL"] = "info" // the stop is logged at Info
	return env
}

// pod is the program running as a pod runs it: this test binary in a
// process of its own (TestMain), with only the pod's environment.
type pod struct {
	t    *testing.T
	env  map[string]string
	cmd  *exec.Cmd
	log  *lockedBuffer
	done chan error
}

// lockedBuffer is the process's stderr, read while it is written.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// startPod starts the program with env; it is killed at the test's end
// if still running, and its log is shown if the test failed.
func startPod(t *testing.T, env map[string]string) *pod {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	p := &pod{t: t, env: env, cmd: exec.Command(exe), log: &lockedBuffer{}, done: make(chan error, 1)}
	p.cmd.Env = []string{runMainEnv + "=1"}
	for k, v := range env {
		p.cmd.Env = append(p.cmd.Env, k+"="+v)
	}
	p.cmd.Stderr = p.log
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.done <- p.cmd.Wait() }()
	t.Cleanup(func() {
		_ = p.cmd.Process.Kill()
		if t.Failed() {
			t.Logf("the log of %s:\n%s", env["KSTATE_INSTANCE_ID"], p.log.String())
		}
	})
	return p
}

// terminate sends SIGTERM, as the kubelet does, and requires exit status
// 0 and the program's "stopped" log line within bound; it returns how
// long the stop took.
func (p *pod) terminate(bound time.Duration) time.Duration {
	p.t.Helper()
	start := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGTERM); err != nil {
		p.t.Fatal(err)
	}
	select {
	case err := <-p.done:
		if err != nil {
			p.t.Fatalf("%s after SIGTERM: %v, want exit status 0", p.env["KSTATE_INSTANCE_ID"], err)
		}
	case <-time.After(bound):
		p.t.Fatalf("%s did not exit within %v of SIGTERM (terminationGracePeriodSeconds counts on it)", p.env["KSTATE_INSTANCE_ID"], bound)
	}
	if !strings.Contains(p.log.String(), `"msg":"stopped"`) {
		p.t.Fatalf("%s exited without logging its stop", p.env["KSTATE_INSTANCE_ID"])
	}
	return time.Since(start)
}

// get GETs path on addr, with the bearer token if not "".
func get(addr, path, token string) (int, string) {
	req, err := http.NewRequest("GET", "http://"+addr+path, nil)
	if err != nil {
		return 0, err.Error()
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// eventually waits up to a minute for cond.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("not within 60s: %s", what)
		}
	}
}

// status is the part of /status the tests read.
type status struct {
	Ready      bool `json:"ready"`
	Partitions []struct {
		Partition int32 `json:"partition"`
		Pipeline  int   `json:"pipeline"`
	} `json:"partitions"`
}

// partitions are the partitions the pod holds, sorted, each as
// "<partition>@p<pipeline>" (the pipeline is the group member that holds
// it), and whether the pod is Ready; nil when /status does not answer.
func (p *pod) partitions() (parts []string, ready bool) {
	code, body := get(p.env["KSTATE_HTTP_ADDR"], "/status", "")
	var s status
	if code != 200 || json.Unmarshal([]byte(body), &s) != nil {
		return nil, false
	}
	parts = []string{}
	for _, ps := range s.Partitions {
		parts = append(parts, fmt.Sprintf("%d@p%d", ps.Partition, ps.Pipeline))
	}
	slices.Sort(parts)
	return parts, s.Ready
}

// rebalances is the pod's kstate_rebalances_total of kind (assigned,
// revoked, lost).
func (p *pod) rebalances(kind string) int {
	p.t.Helper()
	code, body := get(p.env["KSTATE_HTTP_ADDR"], "/metrics", "")
	m := regexp.MustCompile(`(?m)^kstate_rebalances_total\{[^}]*kind="` + kind + `"[^}]*\} (\d+)$`).FindStringSubmatch(body)
	if code != 200 {
		p.t.Fatalf("/metrics: %d %.200s", code, body)
	}
	if m == nil {
		return 0
	}
	n, _ := strconv.Atoi(m[1])
	return n
}

// views is key's live Stats.Views, asked of every pod (the owner answers
// 200, the others 421); -1 when none answers.
func views(pods []*pod, key string) int64 {
	for _, p := range pods {
		code, body := get(p.env["KSTATE_QUERY_ADDR"], "/state/stats/"+key, queryToken)
		var res struct{ Entries []struct{ Value Stats } }
		if code == 200 && json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 {
			return res.Entries[0].Value.Views
		}
	}
	return -1
}
