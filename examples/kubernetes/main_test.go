package main

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

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
	k := startKafka(t, d, 3)
	env := testPodEnv(t, d, d.sts.Name+"-0", k)
	in := k.names["KSTATE_INPUT_TOPIC"]
	s, err := settingsFromEnv(func(k string) string { return env[k] })
	if err != nil {
		t.Fatal(err)
	}
	p := startPod(t, env)
	addr, queryAddr := env["KSTATE_HTTP_ADDR"], env["KSTATE_QUERY_ADDR"]
	ready, live := c.ReadinessProbe.HTTPGet.Path, c.LivenessProbe.HTTPGet.Path
	eventually(t, "GET "+live+" 200", func() bool { code, _ := get(addr, live, ""); return code == 200 })
	eventually(t, "GET "+ready+" 200", func() bool { code, _ := get(addr, ready, ""); return code == 200 })

	produce(t, k, in, "u1=home", "u2=home", "u1=cart")
	eventually(t, "the live query of u1 answers its stats", func() bool {
		code, body := get(queryAddr, "/state/stats/u1", queryToken)
		var res struct{ Entries []struct{ Value Stats } }
		return code == 200 && json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 &&
			res.Entries[0].Value == (Stats{2, "cart"})
	})
	if code, body := get(queryAddr, "/state/stats/u1", "guess"); code != 401 || strings.Contains(body, "cart") {
		t.Fatalf("query with a wrong token: %d %s, want 401", code, body)
	}
	if code, _ := get(addr, "/state/stats/u1", queryToken); code != 404 {
		t.Fatalf("query on the probes' port: %d, want 404", code)
	}
	if code, body := get(addr, "/metrics", ""); code != 200 || !strings.Contains(body, "kstate_records_in_total") {
		t.Fatalf("/metrics: %d %.200s", code, body)
	}
	took := p.terminate(s.opts.Timeouts.Shutdown + kstateHTTPShutdown + queryShutdownTimeout)
	t.Logf("stopped %v after SIGTERM", took.Round(time.Millisecond))
}

// A rolling restart as the StatefulSet does it (pageviews-1, then
// pageviews-0; each stopped with SIGTERM and started again with the same
// name, environment and volume): each pod is back within the session
// timeout as the same static members, so no partition moves, the other
// pod sees no revoke, and the pod's partitions process again well before
// the session timeout; the counts are exact throughout.
func TestRollingRestart(t *testing.T) {
	d := loadDeployment(t, deployDir)
	k := startKafka(t, d, 4)
	in := k.names["KSTATE_INPUT_TOPIC"]
	pods := []*pod{startPod(t, testPodEnv(t, d, d.sts.Name+"-0", k)), startPod(t, testPodEnv(t, d, d.sts.Name+"-1", k))}
	s, err := settingsFromEnv(func(k string) string { return pods[0].env[k] })
	if err != nil {
		t.Fatal(err)
	}
	// Each pod runs two pipelines (GOMAXPROCS is the CPU request, 2):
	// four members, one partition each once the group has settled.
	var assigned [2][]string
	eventually(t, "both pods Ready, each pipeline holding one of the 4 partitions", func() bool {
		for i, p := range pods {
			parts, ready := p.partitions()
			var pipelines []string
			for _, part := range parts {
				_, pl, _ := strings.Cut(part, "@")
				pipelines = append(pipelines, pl)
			}
			if slices.Sort(pipelines); !ready || !slices.Equal(pipelines, []string{"p0", "p1"}) {
				return false
			}
			assigned[i] = parts
		}
		return true
	})
	t.Logf("partitions: %s %v, %s %v", d.sts.Name+"-0", assigned[0], d.sts.Name+"-1", assigned[1])
	keys := []string{"u0", "u1", "u2", "u3", "u4", "u5", "u6", "u7"}
	round := func(n int64) {
		t.Helper()
		var recs []string
		for _, k := range keys {
			recs = append(recs, k+"=page"+strconv.FormatInt(n, 10))
		}
		produce(t, k, in, recs...)
		eventually(t, fmt.Sprintf("every key's views at %d", n), func() bool {
			for _, k := range keys {
				if v := views(pods, k); v != n {
					if v > n {
						t.Fatalf("%s: %d views after %d rounds: counted twice", k, v, n)
					}
					return false
				}
			}
			return true
		})
	}
	round(1)
	for r, i := range []int{1, 0} { // the StatefulSet's order: the highest ordinal first
		other := pods[1-i]
		revoked, lost := other.rebalances("revoked"), other.rebalances("lost")
		stopped := pods[i].terminate(s.opts.Timeouts.Shutdown + kstateHTTPShutdown + queryShutdownTimeout)
		begin := time.Now()
		pods[i] = startPod(t, pods[i].env)
		eventually(t, pods[i].env["KSTATE_INSTANCE_ID"]+" Ready again", func() bool { _, ready := pods[i].partitions(); return ready })
		back := time.Since(begin)
		t.Logf("%s: stopped in %v after SIGTERM, Ready %v after its start", pods[i].env["KSTATE_INSTANCE_ID"],
			stopped.Round(time.Millisecond), back.Round(time.Millisecond))
		round(int64(r + 2))
		// A member that does not come back as itself leaves its
		// partitions unprocessed until its session expires.
		if pause := stopped + time.Since(begin); pause >= s.opts.Kafka.SessionTimeout {
			t.Fatalf("%v from SIGTERM to the next round's counts, not within the session timeout %v", pause, s.opts.Kafka.SessionTimeout)
		}
		for j, p := range pods {
			parts, _ := p.partitions()
			if !k.real {
				// The embedded Kafka (kfake) may swap the partitions of
				// a restarted pod's two static members (the pipelines)
				// where Apache Kafka gives each its own back: compare
				// the pod's partitions only.
				parts, assigned[j] = byPod(parts), byPod(assigned[j])
			}
			if !slices.Equal(parts, assigned[j]) {
				t.Fatalf("after the restart of %s: %s holds %v, held %v: a partition moved", pods[i].env["KSTATE_INSTANCE_ID"],
					p.env["KSTATE_INSTANCE_ID"], parts, assigned[j])
			}
		}
		if r, l := other.rebalances("revoked"), other.rebalances("lost"); r != revoked || l != lost {
			t.Fatalf("the restart of %s made %s's revokes %d → %d, losses %d → %d: a rebalance", pods[i].env["KSTATE_INSTANCE_ID"],
				other.env["KSTATE_INSTANCE_ID"], revoked, r, lost, l)
		}
	}
}

// byPod drops the pipelines of partitions' "<partition>@p<pipeline>".
func byPod(parts []string) []string {
	var out []string
	for _, part := range parts {
		p, _, _ := strings.Cut(part, "@")
		out = append(out, p)
	}
	slices.Sort(out)
	return out
}

// produce writes "key=value" records to topic.
func produce(t *testing.T, k testKafka, topic string, kvs ...string) {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	for _, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		if err := cl.ProduceSync(context.Background(), &kgo.Record{Topic: topic, Key: []byte(k), Value: []byte(v)}).FirstErr(); err != nil {
			t.Fatal(err)
		}
	}
}

// The kubelet's SIGKILL (a grace period run out, an OOM kill) in the
// middle of the input, then the pod started again with the same name and
// volume: the killed pod's open transaction is fenced and its batch
// redone, so every key's count is exact and the committed outputs
// (read_committed) count each key up by its records, never repeating a
// value.
func TestPodKilled(t *testing.T) {
	d := loadDeployment(t, deployDir)
	k := startKafka(t, d, 3)
	in, out := k.names["KSTATE_INPUT_TOPIC"], k.names["KSTATE_OUTPUT_TOPIC"]
	env := testPodEnv(t, d, d.sts.Name+"-0", k)
	p := startPod(t, env)
	eventually(t, "Ready", func() bool { _, ready := p.partitions(); return ready })

	const keys, perKey = 20, 100
	var recs []string
	for i := range perKey {
		for k := range keys {
			recs = append(recs, fmt.Sprintf("u%d=page%d", k, i))
		}
	}
	produced := make(chan error, 1)
	var rounds atomic.Int64
	go func() {
		cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...))
		if err != nil {
			produced <- err
			return
		}
		defer cl.Close()
		for i := 0; i < len(recs) && err == nil; i += keys {
			for _, kv := range recs[i : i+keys] {
				k, v, _ := strings.Cut(kv, "=")
				cl.Produce(context.Background(), &kgo.Record{Topic: in, Key: []byte(k), Value: []byte(v)}, nil)
			}
			err = cl.Flush(context.Background())
			rounds.Add(1)
			time.Sleep(20 * time.Millisecond) // input keeps coming while the pod is killed
		}
		produced <- err
	}()
	eventually(t, "the first counts", func() bool { return views([]*pod{p}, "u0") > 0 })
	if err := p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	<-p.done
	t.Logf("SIGKILL after %d of %d rounds of input were written", rounds.Load(), perKey)
	p = startPod(t, env)
	if err := <-produced; err != nil {
		t.Fatal(err)
	}
	eventually(t, fmt.Sprintf("every key at %d views", perKey), func() bool {
		for k := range keys {
			if v := views([]*pod{p}, fmt.Sprintf("u%d", k)); v != perKey {
				if v > perKey {
					t.Fatalf("u%d: %d views of %d records", k, v, perKey)
				}
				return false
			}
		}
		return true
	})

	cl, err := kgo.NewClient(kgo.SeedBrokers(k.brokers...), kgo.ConsumeTopics(out),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	last := map[string]int64{}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for done := 0; done < keys; {
		fs := cl.PollFetches(ctx)
		if err := ctx.Err(); err != nil {
			t.Fatalf("reading %s: %v; last views per key %v", out, err, last)
		}
		fs.EachRecord(func(r *kgo.Record) {
			var s Stats
			if err := json.Unmarshal(r.Value, &s); err != nil {
				t.Fatalf("output %s: %v", r.Value, err)
			}
			k := string(r.Key)
			if s.Views <= last[k] {
				t.Fatalf("%s: committed output %d views after %d: a batch committed twice", k, s.Views, last[k])
			}
			last[k] = s.Views
			if s.Views == perKey {
				done++
			}
		})
	}
	t.Logf("outputs exact for %d keys × %d records across a SIGKILL", keys, perKey)
}
