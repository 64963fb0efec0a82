package main

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"io"
	"math/big"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/kafka/embedded"
)

func env(m map[string]string) func(string) string { return func(k string) string { return m[k] } }

// writeCA writes a self-signed CA certificate as PEM and returns its path.
func writeCA(t *testing.T) string {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true,
		BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(p, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestSettingsFromEnv(t *testing.T) {
	if _, err := settingsFromEnv(env(nil)); err == nil || !strings.Contains(err.Error(), "KSTATE_BROKERS") {
		t.Fatalf("no brokers: %v", err)
	}
	s, err := settingsFromEnv(env(map[string]string{"KSTATE_BROKERS": "a:9092,b:9092"}))
	if err != nil {
		t.Fatal(err)
	}
	c := s.opts
	if len(c.Kafka.Brokers) != 2 || c.ApplicationID != "pageviews" || c.Observability.HTTPAddr != ":8080" || c.Kafka.TLS != nil || c.Kafka.SASL != nil ||
		c.State.Dir != "/var/lib/kstate" || c.InstanceID == "" || c.Kafka.LeaveGroupOnShutdown || c.State.Memory != 0 || s.queryAddr != "" ||
		s.top.Inputs[0].Topic != "page-views" || s.top.Output.Topic != "user-stats" {
		t.Fatalf("defaults: %+v", c)
	}
	s, err = settingsFromEnv(env(map[string]string{
		"KSTATE_BROKERS": "kafka:9093", "KSTATE_TLS_CA_FILE": writeCA(t),
		"KSTATE_SASL_MECHANISM": "scram-sha-512", "KSTATE_SASL_USERNAME": "pageviews", "KSTATE_SASL_PASSWORD": "secret",
		"KSTATE_STATE_MEMORY": "268435456", "KSTATE_LEAVE_GROUP_ON_SHUTDOWN": "true", "KSTATE_INSTANCE_ID": "pageviews-0",
		"KSTATE_LOG_LEVEL": "debug",
	}))
	if err != nil {
		t.Fatal(err)
	}
	c = s.opts
	if c.Kafka.TLS == nil || c.Kafka.TLS.RootCAs == nil || c.Kafka.SASL == nil || c.Kafka.SASL.Name() != "SCRAM-SHA-512" ||
		c.State.Memory != 256<<20 || !c.Kafka.LeaveGroupOnShutdown || c.InstanceID != "pageviews-0" || s.logLevel.String() != "DEBUG" {
		t.Fatalf("secured: %+v", c)
	}
	for name, m := range map[string]map[string]string{
		"KSTATE_SASL_":         {"KSTATE_SASL_MECHANISM": "GSSAPI", "KSTATE_SASL_USERNAME": "u"},
		"KSTATE_TLS_":          {"KSTATE_TLS_CERT_FILE": "/nonexistent.pem"},
		"KSTATE_STATE_MEMORY":  {"KSTATE_STATE_MEMORY": "lots"},
		"KSTATE_TLS=":          {"KSTATE_TLS": "maybe"},
		"KSTATE_LOG_LEVEL":     {"KSTATE_LOG_LEVEL": "loud"},
		"KSTATE_LEAVE_GROUP_O": {"KSTATE_LEAVE_GROUP_ON_SHUTDOWN": "yes please"},
		"KSTATE_QUERY_TOKEN":   {"KSTATE_QUERY_ADDR": ":8081"},
	} {
		m["KSTATE_BROKERS"] = "kafka:9092"
		if _, err := settingsFromEnv(env(m)); err == nil || !strings.Contains(err.Error(), name) {
			t.Errorf("%v: error %v, want one naming %s", m, err, name)
		}
	}
}

// The service on the embedded Kafka: ready, counts exact, its endpoints
// answer, and cancelling (what SIGTERM does) makes run return nil.
func TestServiceRuns(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"page-views": 3, "user-stats": 3}})
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
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, env(map[string]string{
			"KSTATE_BROKERS": strings.Join(e.Brokers(), ","), "KSTATE_STATE_DIR": t.TempDir(),
			"KSTATE_HTTP_ADDR": addr, "KSTATE_INSTANCE_ID": "pageviews-0", "KSTATE_LOG_LEVEL": "warn",
			"KSTATE_QUERY_ADDR": queryAddr, "KSTATE_QUERY_TOKEN": "s3cret",
		}))
	}()
	defer cancel()
	// getAt GETs path on addr, with the bearer token if not "".
	getAt := func(addr, path, token string) (int, string) {
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
	get := func(path string) (int, string) { return getAt(addr, path, "") }
	testprocs.Eventually(t, 30*time.Second, "/readyz 200", func() bool {
		time.Sleep(50 * time.Millisecond)
		code, _ := get("/readyz")
		return code == 200
	})
	testprocs.Produce(t, e.Brokers(), "page-views", "u1=home", "u2=home", "u1=cart")
	out := testprocs.WaitOutputs(t, e.Brokers(), "user-stats", 2, 30*time.Second)
	last := func(k string) Stats {
		vs := out[k]
		var s Stats
		if len(vs) == 0 || json.Unmarshal([]byte(vs[len(vs)-1]), &s) != nil {
			t.Fatalf("outputs of %s: %v", k, vs)
		}
		return s
	}
	if u1, u2 := last("u1"), last("u2"); u1 != (Stats{2, "cart"}) || u2 != (Stats{1, "home"}) {
		t.Fatalf("stats u1 %+v u2 %+v", u1, u2)
	}
	for path, want := range map[string]string{
		"/metrics": "kstate_records_in_total", "/healthz": "ok", "/status": `"state": "Running"`, "/": "<html",
	} {
		// Eventually: on a broker without an initial rebalance delay (the
		// test's) the second pipeline joins after the first one took every
		// partition and gets half of them, which it restores ("Restoring")
		// in the first seconds (docs/OPERATIONS.md, kstate_aborts_total).
		testprocs.Eventually(t, 15*time.Second, fmt.Sprintf("GET %s: 200 with %q", path, want), func() bool {
			code, body := get(path)
			return code == 200 && strings.Contains(body, want)
		})
	}
	// The live queries are on their own port, for the token's bearers
	// only; the probes' port does not serve them.
	testprocs.Eventually(t, 10*time.Second, "live query of u1", func() bool {
		time.Sleep(20 * time.Millisecond)
		code, body := getAt(queryAddr, "/state/stats/u1", "s3cret")
		var res struct{ Entries []struct{ Value Stats } }
		return code == 200 && json.Unmarshal([]byte(body), &res) == nil && len(res.Entries) == 1 &&
			res.Entries[0].Value == (Stats{2, "cart"})
	})
	for _, token := range []string{"", "guess", "s3cre", "s3cret2"} {
		if code, body := getAt(queryAddr, "/state/stats/u1", token); code != 401 || strings.Contains(body, "cart") {
			t.Fatalf("GET /state/stats/u1 with token %q: %d %s, want 401", token, code, body)
		}
	}
	if code, body := get("/state/stats/u1"); code != 404 || strings.Contains(body, "cart") {
		t.Fatalf("GET /state/stats/u1 on KSTATE_HTTP_ADDR: %d %s, want 404", code, body)
	}
	if code, body := getAt(queryAddr, "/status", "s3cret"); code != 404 {
		t.Fatalf("GET /status on KSTATE_QUERY_ADDR: %d %.200s, want 404", code, body)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("run after cancel (SIGTERM): %v", err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("run did not return within 30s of cancel")
	}
}
