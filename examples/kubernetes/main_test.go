package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestSettingsFromEnv(t *testing.T) {
	base := map[string]string{
		"KSTATE_BROKERS": "a:9092,b:9092", "KSTATE_INSTANCE_ID": "pageviews-1", "KSTATE_STATE_DIR": "/var/lib/kstate",
		"KSTATE_QUERY_TOKEN": "t",
	}
	with := func(k, v string) func(string) string {
		return func(name string) string {
			if name == k {
				return v
			}
			return base[name]
		}
	}
	s, err := settingsFromEnv(with("", ""))
	if err != nil {
		t.Fatal(err)
	}
	o := s.opts
	if len(o.Kafka.Brokers) != 2 || o.ApplicationID != "pageviews" || o.InstanceID != "pageviews-1" || o.State.Dir != "/var/lib/kstate" ||
		o.Observability.HTTPAddr != ":8081" || s.queryAddr != ":8080" || o.Group.AdvertisedURL != "" || o.Group.Standbys != 0 ||
		o.State.Memory != 0 || o.Kafka.SessionTimeout != 0 || o.Timeouts.Shutdown != 0 || o.Kafka.LeaveGroupOnShutdown {
		t.Fatalf("defaults: %+v", o)
	}
	for k, check := range map[string]func(settings) bool{
		"KSTATE_STATE_MEMORY=768MiB":          func(s settings) bool { return s.opts.State.Memory == 768<<20 },
		"KSTATE_STANDBYS=1":                   func(s settings) bool { return s.opts.Group.Standbys == 1 },
		"KSTATE_SESSION_TIMEOUT=45s":          func(s settings) bool { return s.opts.Kafka.SessionTimeout == 45*time.Second },
		"KSTATE_SHUTDOWN_TIMEOUT=1m":          func(s settings) bool { return s.opts.Timeouts.Shutdown == time.Minute },
		"KSTATE_LEAVE_GROUP_ON_SHUTDOWN=true": func(s settings) bool { return s.opts.Kafka.LeaveGroupOnShutdown },
		"KSTATE_ADVERTISED_URL=http://p-0.p.ns.svc:8080": func(s settings) bool {
			return s.opts.Group.AdvertisedURL == "http://p-0.p.ns.svc:8080"
		},
	} {
		name, v, _ := strings.Cut(k, "=")
		s, err := settingsFromEnv(with(name, v))
		if err != nil || !check(s) {
			t.Errorf("%s: %v %+v", k, err, s.opts)
		}
	}
	// A bad or missing value is an error naming the variable.
	for _, k := range []string{
		"KSTATE_BROKERS=", "KSTATE_INSTANCE_ID=", "KSTATE_STATE_DIR=", "KSTATE_QUERY_TOKEN=", "KSTATE_STANDBYS=-1",
		"KSTATE_STATE_MEMORY=1.5GiB", "KSTATE_STATE_MEMORY=768M", "KSTATE_SESSION_TIMEOUT=30", "KSTATE_SHUTDOWN_TIMEOUT=-1s",
		"KSTATE_LEAVE_GROUP_ON_SHUTDOWN=yes", "KSTATE_ADVERTISED_URL=pageviews-0:8080", "KSTATE_LOG_LEVEL=loud",
	} {
		name, v, _ := strings.Cut(k, "=")
		if _, err := settingsFromEnv(with(name, v)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%s: error %v, want one naming %s", k, err, name)
		}
	}
}

func TestParseBytes(t *testing.T) {
	for v, want := range map[string]int64{"0": 0, "1024": 1024, "7B": 7, "2KiB": 2048, "768MiB": 768 << 20, "2GiB": 2 << 30, "1TiB": 1 << 40} {
		if got, err := parseBytes(v); err != nil || got != want {
			t.Errorf("parseBytes(%q) = %d, %v; want %d", v, got, err, want)
		}
	}
	for _, v := range []string{"", "-1", "1.5GiB", "2Gi", "2G", "MiB", "99999999999TiB"} {
		if _, err := parseBytes(v); err == nil {
			t.Errorf("parseBytes(%q): no error", v)
		}
	}
}

// The pod as the manifests configure it, on the embedded Kafka: the
// environment of pod pageviews-0 (the addresses and directory changed to
// the test's), ready on the readiness probe's path, counting, answering
// live queries at its query port with the token only, and exiting 0 on
// SIGTERM within the bound terminationGracePeriodSeconds counts on.
func TestPodRuns(t *testing.T) {
	d := loadDeployment(t, deployDir)
	c := d.sts.Spec.Template.Spec.Containers[0]
	env, errs := podEnv(d, c, d.sts.Name+"-0", "default")
	if len(errs) > 0 {
		t.Fatal(errs)
	}
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{env["KSTATE_INPUT_TOPIC"]: 3, env["KSTATE_OUTPUT_TOPIC"]: 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	freeAddr := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return ln.Addr().String()
	}
	addr, queryAddr := freeAddr(), freeAddr()
	env["KSTATE_BROKERS"] = strings.Join(e.Brokers(), ",")
	env["KSTATE_STATE_DIR"] = t.TempDir()
	env["KSTATE_HTTP_ADDR"], env["KSTATE_QUERY_ADDR"] = addr, queryAddr
	env["KSTATE_ADVERTISED_URL"] = "http://" + queryAddr
	env["KSTATE_QUERY_TOKEN"] = "s3cret"
	env["KSTATE_LOG_LEVEL"] = "info" // its stop is logged at Info
	s, err := settingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// The program itself, in a process of its own with only the pod's
	// environment: this test binary, which runs main (TestMain).
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	cmd := exec.CommandContext(ctx, exe)
	cmd.Env = []string{runMainEnv + "=1"}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	defer func() {
		if t.Failed() {
			t.Logf("the program's log:\n%s", stderr.String())
		}
	}()

	get := func(addr, path, token string) (int, string) {
		req, err := http.NewRequest("GET", "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
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
	eventually := func(what string, cond func() bool) {
		t.Helper()
		for deadline := time.Now().Add(60 * time.Second); !cond(); time.Sleep(50 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("not within 60s: %s", what)
			}
		}
	}
	ready, live := c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path
	eventually("GET "+live+" 200", func() bool { code, _ := get(addr, live, ""); return code == 200 })
	eventually("GET "+ready+" 200", func() bool { code, _ := get(addr, ready, ""); return code == 200 })

	cl, err := kgo.NewClient(kgo.SeedBrokers(e.Brokers()...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, kv := range []string{"u1=home", "u2=home", "u1=cart"} {
		k, v, _ := strings.Cut(kv, "=")
		if err := cl.ProduceSync(ctx, &kgo.Record{Topic: env["KSTATE_INPUT_TOPIC"], Key: []byte(k), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
	eventually("the live query of u1 answers its stats", func() bool {
		code, body := get(queryAddr, "/state/stats/u1", "s3cret")
		var res struct{ Entries []struct{ Value Stats } }
		return code == 200 && json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 &&
			res.Entries[0].Value == (Stats{2, "cart"})
	})
	if code, body := get(queryAddr, "/state/stats/u1", "guess"); code != 401 || strings.Contains(body, "cart") {
		t.Fatalf("query with a wrong token: %d %s, want 401", code, body)
	}
	if code, _ := get(addr, "/state/stats/u1", "s3cret"); code != 404 {
		t.Fatalf("query on the probes' port: %d, want 404", code)
	}
	if code, body := get(addr, "/metrics", ""); code != 200 || !strings.Contains(body, "kstate_records_in_total") {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}

	// What the kubelet does to stop the pod.
	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	bound := s.opts.Timeouts.Shutdown + kstateHTTPShutdown + queryShutdownTimeout
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("the program after SIGTERM: %v, want exit status 0", err)
		}
		if !strings.Contains(stderr.String(), `"msg":"stopped"`) {
			t.Fatalf("the program exited without logging its stop")
		}
		t.Logf("stopped %v after SIGTERM", time.Since(start).Round(time.Millisecond))
	case <-time.After(bound):
		t.Fatalf("the program did not exit within %v of SIGTERM (terminationGracePeriodSeconds counts on it)", bound)
	}
}

// runMainEnv, set to 1, makes the test binary run the program's main
// instead of the tests (TestPodRuns).
const runMainEnv = "PAGEVIEWS_TEST_RUN_MAIN"

func TestMain(m *testing.M) {
	if os.Getenv(runMainEnv) == "1" {
		main() // exits 1 on an error
		os.Exit(0)
	}
	os.Exit(m.Run())
}
