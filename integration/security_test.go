package integration

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kafkabroker"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
	"github.com/kstate/kstate/serde"
)

// The security tests run on a broker of their own: SASL_SSL only
// (SCRAM-SHA-512 over TLS, certificates made here), ACLs enforced, nothing
// allowed without one. The application runs as User:app with exactly the
// ACLs docs/OPERATIONS.md lists; the test itself works as the super user
// User:admin.

const (
	adminPassword = "admin-secret-1"
	appPassword   = "app-secret-1"
)

type secureBroker struct {
	brokers []string
	caFile  string
	admin   kafka.ClientConfig // User:admin over TLS
	adm     *kadm.Client
}

func startSecureBroker(t *testing.T) *secureBroker {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	libs, err := kafkabroker.ResolveJars(ctx, t.Logf)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("SASL_SSL broker: %v", err)
		}
		t.Skipf("SKIPPED LOUDLY: no real Kafka jars for the SASL_SSL broker: %v", err)
	}
	caPEM, certPEM, keyPEM := newTestPKI(t)
	b, err := kafkabroker.StartBroker(ctx, libs, kafkabroker.StartOptions{Secure: &kafkabroker.SASLSSL{
		CertPEM: certPEM, KeyPEM: keyPEM, CAPEM: caPEM,
		AdminPassword: adminPassword,
		Users:         map[string]string{"app": appPassword},
	}}, t.Logf)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Discard)
	caFile := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(caFile, caPEM, 0o644); err != nil {
		t.Fatal(err)
	}
	tlsCfg, err := kstate.TLSConfigFromFiles(caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	mech, err := kstate.SASLFromStrings("SCRAM-SHA-512", "admin", adminPassword)
	if err != nil {
		t.Fatal(err)
	}
	sb := &secureBroker{brokers: []string{b.Addr}, caFile: caFile,
		admin: kafka.ClientConfig{Brokers: []string{b.Addr}, TLS: tlsCfg, SASL: mech}}
	cl, err := kgo.NewClient(sb.admin.Opts()...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	sb.adm = kadm.NewClient(cl)
	return sb
}

// newTestPKI makes a CA and a broker certificate for 127.0.0.1/localhost
// signed by it; the key is PKCS#8, as Kafka's PEM key store wants it.
func newTestPKI(t *testing.T) (caPEM, certPEM, keyPEM []byte) {
	t.Helper()
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	ca := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "kstate test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, ca, ca, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		t.Fatal(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	leaf := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "admin"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"},
	}
	der, err := x509.CreateCertificate(rand.Reader, leaf, caCert, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	pk, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}),
		pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}),
		pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk})
}

// acl is one allow rule for User:app.
type acl struct {
	typ    kmsg.ACLResourceType
	name   string
	prefix bool
	op     kadm.ACLOperation
}

func (a acl) String() string {
	pat := "literal"
	if a.prefix {
		pat = "prefixed"
	}
	return fmt.Sprintf("%s %q (%s) %s", a.typ, a.name, pat, a.op)
}

// appACLs is docs/OPERATIONS.md's least-privilege list for application
// app reading in and writing out, with a dead-letter topic.
func appACLs(app, in, out string) []acl {
	return []acl{
		{kmsg.ACLResourceTypeTopic, in, false, kadm.OpRead},
		{kmsg.ACLResourceTypeTopic, out, false, kadm.OpWrite},
		{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpCreate},
		{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpDescribeConfigs},
		{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpRead},
		{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpWrite},
		{kmsg.ACLResourceTypeTopic, app + "-dlq", false, kadm.OpCreate},
		{kmsg.ACLResourceTypeTopic, app + "-dlq", false, kadm.OpWrite},
		{kmsg.ACLResourceTypeGroup, app, false, kadm.OpRead},
		{kmsg.ACLResourceTypeTransactionalId, app + "-", true, kadm.OpWrite},
	}
}

func (a acl) builder() *kadm.ACLBuilder {
	b := kadm.NewACLs().Allow("User:app").Operations(a.op)
	switch a.typ {
	case kmsg.ACLResourceTypeTopic:
		b.Topics(a.name)
	case kmsg.ACLResourceTypeGroup:
		b.Groups(a.name)
	case kmsg.ACLResourceTypeTransactionalId:
		b.TransactionalIDs(a.name)
	case kmsg.ACLResourceTypeCluster:
		b.Clusters()
	}
	if a.prefix {
		b.ResourcePatternType(kadm.ACLPatternPrefixed)
	}
	return b
}

// revoke deletes one rule.
func (sb *secureBroker) revoke(t *testing.T, a acl) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := sb.adm.DeleteACLs(ctx, a.builder().AllowHosts())
	if err == nil && (len(res) != 1 || res[0].Err != nil || len(res[0].Deleted) != 1) {
		err = fmt.Errorf("results %+v", res)
	}
	if err != nil {
		t.Fatalf("delete ACL %v: %v", a, err)
	}
}

func (sb *secureBroker) grant(t *testing.T, acls []acl) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, a := range acls {
		b := a.builder()
		res, err := sb.adm.CreateACLs(ctx, b)
		if err == nil {
			for _, r := range res {
				if r.Err != nil {
					err = fmt.Errorf("%v: %s", r.Err, r.ErrMessage)
				}
			}
		}
		if err != nil {
			t.Fatalf("create ACL %v: %v", a, err)
		}
	}
}

// secEnv is one application on the secure broker.
type secEnv struct {
	sb           *secureBroker
	app, in, out string
}

func (sb *secureBroker) newEnv(t *testing.T, name string) secEnv {
	t.Helper()
	id := fmt.Sprintf("sec-%s-%d", name, time.Now().UnixNano()%1_000_000_000)
	e := secEnv{sb: sb, app: id, in: id + "-in", out: id + "-out"}
	adm, err := sb.admin.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, topic := range []string{e.in, e.out} {
		if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: topic, Partitions: 2, ReplicationFactor: -1}); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// config is the counter app as User:app over TLS with SCRAM-SHA-512, with
// nil keys sent to the dead-letter topic.
func (e secEnv) config(t *testing.T, password string) testApp[string, string, string] {
	t.Helper()
	tlsCfg, err := kstate.TLSConfigFromFiles(e.sb.caFile, "", "")
	if err != nil {
		t.Fatal(err)
	}
	mech, err := kstate.SASLFromStrings("SCRAM-SHA-512", "app", password)
	if err != nil {
		t.Fatal(err)
	}
	return testApp[string, string, string]{kstate.Topology[string, string, string]{
		Inputs:        kstate.Topics(serde.String(), e.in),
		KeySerde:      serde.String(),
		NewProcessor:  testprocs.NewCounter,
		OnDecodeError: kstate.DecodeErrorDeadLetter,
		Output: kstate.Output[string, string]{
			Topic: e.out,
			Serde: serde.String(),
		},
	}, kstate.Options{
		ApplicationID: e.app,
		InstanceID:    "i1",
		Kafka: kstate.KafkaOptions{
			Brokers:       e.sb.brokers,
			TLS:           tlsCfg,
			SASL:          mech,
			ClientOptions: []kgo.Opt{kgo.ClientID("kstate-security-test")},
		},
		State: kstate.StateOptions{
			Dir: t.TempDir(),
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 100 * time.Millisecond,
		},
		Timeouts: kstate.TimeoutOptions{
			Shutdown: 10 * time.Second,
			Startup:  20 * time.Second,
		},
		Observability: kstate.ObservabilityOptions{
			Logger: testlog.New(t),
		},
	}}
}

// produce writes "key=value" records as admin; "=value" has a nil key.
func (e secEnv) produce(t *testing.T, kvs ...string) {
	t.Helper()
	p, err := e.sb.admin.NewProducer()
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	recs := make([]kafka.Record, len(kvs))
	for i, kv := range kvs {
		k, v, _ := strings.Cut(kv, "=")
		recs[i] = kafka.Record{Topic: e.in, Partition: kafka.AnyPartition, Value: []byte(v)}
		if k != "" {
			recs[i].Key = []byte(k)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.Produce(ctx, recs...); err != nil {
		t.Fatal(err)
	}
}

// waitRecords reads topic read_committed as admin until it has n records.
func (e secEnv) waitRecords(t *testing.T, topic string, n int) []kafka.Record {
	t.Helper()
	deadline := time.Now().Add(waitOut)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		recs, err := e.sb.admin.ReadAll(ctx, topic)
		cancel()
		if err == nil && len(recs) >= n {
			return recs
		}
		if time.Now().After(deadline) {
			t.Fatalf("topic %s: waited %v for %d records, have %d (err %v)", topic, waitOut, n, len(recs), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestSecuritySASLSSL(t *testing.T) {
	t.Parallel()
	sb := startSecureBroker(t)

	// (a) Exactly the documented ACLs are enough: exact output, the
	// dead-letter topic created and written, across a restart that
	// restores from the changelog on an empty state directory.
	t.Run("LeastPrivilegeACLs", func(t *testing.T) {
		e := sb.newEnv(t, "ok")
		sb.grant(t, appACLs(e.app, e.in, e.out))
		cfg := e.config(t, appPassword)
		app := newSpecApp(t, cfg)
		stop := testprocs.Start(t, app)
		e.produce(t, "a=x", "b=x", "a=y", "=no-key", "a=z", "b=y")
		got := outputsOf(e.waitRecords(t, e.out, 5))
		wantOutputs(t, got, "a=[1 2 3] b=[1 2]")
		if dlq := e.waitRecords(t, e.app+"-dlq", 1); len(dlq) != 1 || string(dlq[0].Value) != "no-key" {
			t.Fatalf("dead-letter topic: %v", dlq)
		}
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		cfg.State.Dir = t.TempDir() // restore everything from the changelog
		app = newSpecApp(t, cfg)
		stop = testprocs.Start(t, app)
		e.produce(t, "a=w", "c=x")
		e.waitRecords(t, e.out, 7)
		if err := stop(); err != nil {
			t.Fatalf("Run after restart: %v", err)
		}
		time.Sleep(time.Second) // nothing more may come
		wantOutputs(t, outputsOf(e.waitRecords(t, e.out, 7)), "a=[1 2 3 4] b=[1 2] c=[1]")
	})

	// (b) Each missing ACL stops Run promptly with an error naming it.
	for _, tc := range []struct {
		name string
		drop func(app, in, out string) acl
		op   string
		typ  string
		res  func(app, in, out string) string
	}{
		{"ChangelogWrite", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpWrite}
		}, "Write", "topic", func(app, _, _ string) string { return app + "-changelog" }},
		{"OutputWrite", func(_, _, out string) acl {
			return acl{kmsg.ACLResourceTypeTopic, out, false, kadm.OpWrite}
		}, "Write", "topic", func(_, _, out string) string { return out }},
		{"TransactionalIDWrite", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTransactionalId, app + "-", true, kadm.OpWrite}
		}, "Write", "transactional id", func(app, _, _ string) string { return app + "-i1" }},
		{"GroupRead", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeGroup, app, false, kadm.OpRead}
		}, "Read", "group", func(app, _, _ string) string { return app }},
		{"InputRead", func(_, in, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, in, false, kadm.OpRead}
		}, "Read", "topic", func(_, in, _ string) string { return in }},
		{"DeadLetterWrite", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, app + "-dlq", false, kadm.OpWrite}
		}, "Write", "topic", func(app, _, _ string) string { return app + "-dlq" }},
		{"DeadLetterCreate", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, app + "-dlq", false, kadm.OpCreate}
		}, "Create", "topic", func(app, _, _ string) string { return app + "-dlq" }},
		{"ChangelogDescribeConfigs", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpDescribeConfigs}
		}, "DescribeConfigs", "topic", func(app, _, _ string) string { return app + "-changelog" }},
		{"ChangelogCreate", func(app, _, _ string) acl {
			return acl{kmsg.ACLResourceTypeTopic, app + "-changelog", false, kadm.OpCreate}
		}, "Create", "topic", func(app, _, _ string) string { return app + "-changelog" }},
	} {
		t.Run("Missing"+tc.name, func(t *testing.T) {
			e := sb.newEnv(t, strings.ToLower(tc.name))
			drop := tc.drop(e.app, e.in, e.out)
			var acls []acl
			for _, a := range appACLs(e.app, e.in, e.out) {
				if a != drop {
					acls = append(acls, a)
				}
			}
			if len(acls) != len(appACLs(e.app, e.in, e.out))-1 {
				t.Fatalf("%v is not in the list", drop)
			}
			sb.grant(t, acls)
			app := newSpecApp(t, e.config(t, appPassword))
			start := time.Now()
			_, done := testprocs.StartWatch(t, app)
			e.produce(t, "a=x", "b=x")
			var err error
			select {
			case err = <-done:
			case <-time.After(60 * time.Second):
				t.Fatalf("without %v Run still runs after 60s", drop)
			}
			t.Logf("without %v: Run returned after %v: %v", drop, time.Since(start).Round(time.Millisecond), err)
			var ae *kstate.AuthorizationError
			if !errors.As(err, &ae) || !errors.Is(err, kstate.ErrNotAuthorized) {
				t.Fatalf("Run = %v; want an *AuthorizationError", err)
			}
			want := tc.res(e.app, e.in, e.out)
			if tc.typ == "transactional id" && ae.Resource == want+"-p1" {
				want = ae.Resource // the second pipeline (automatic count) can be refused first
			}
			if ae.Operation != tc.op || ae.ResourceType != tc.typ || ae.Resource != want {
				t.Fatalf("error names %s on %s %q; want %s on %s %q", ae.Operation, ae.ResourceType, ae.Resource, tc.op, tc.typ, want)
			}
			if !strings.Contains(err.Error(), fmt.Sprintf("%s on %s %q", tc.op, tc.typ, want)) {
				t.Fatalf("message %q does not name the permission", err)
			}
		})
	}

	// Read on the changelog is needed only once there is state to restore:
	// a restart on an empty state directory without it fails at the
	// restore, naming it.
	t.Run("MissingChangelogReadAtRestore", func(t *testing.T) {
		e := sb.newEnv(t, "restore")
		sb.grant(t, appACLs(e.app, e.in, e.out))
		cfg := e.config(t, appPassword)
		stop := testprocs.Start(t, newSpecApp(t, cfg))
		e.produce(t, "a=x", "b=x")
		e.waitRecords(t, e.out, 2)
		if err := stop(); err != nil {
			t.Fatalf("Run: %v", err)
		}
		drop := acl{kmsg.ACLResourceTypeTopic, e.app + "-changelog", false, kadm.OpRead}
		sb.revoke(t, drop)
		cfg.State.Dir = t.TempDir()
		start := time.Now()
		_, done := testprocs.StartWatch(t, newSpecApp(t, cfg))
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			t.Fatalf("without %v Run still runs after 60s", drop)
		}
		t.Logf("without %v: Run returned after %v: %v", drop, time.Since(start).Round(time.Millisecond), err)
		var ae *kstate.AuthorizationError
		if !errors.As(err, &ae) || ae.Operation != "Read" || ae.ResourceType != "topic" || ae.Resource != e.app+"-changelog" {
			t.Fatalf("Run = %v; want an *AuthorizationError naming Read on the changelog", err)
		}
	})

	// (c) A wrong password, or a CA that does not sign the broker's
	// certificate, is an authentication error at once, not a hang.
	t.Run("WrongPassword", func(t *testing.T) {
		e := sb.newEnv(t, "pw")
		sb.grant(t, appACLs(e.app, e.in, e.out))
		app := newSpecApp(t, e.config(t, "wrong-password"))
		start := time.Now()
		_, done := testprocs.StartWatch(t, app)
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("Run with a wrong password still runs after 60s")
		}
		t.Logf("wrong password: Run returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
		var ae *kstate.AuthenticationError
		if !errors.As(err, &ae) || !errors.Is(err, kstate.ErrAuthentication) || ae.Code != "SASL_AUTHENTICATION_FAILED" {
			t.Fatalf("Run = %v; want an *AuthenticationError SASL_AUTHENTICATION_FAILED", err)
		}
	})
	t.Run("UntrustedCertificate", func(t *testing.T) {
		e := sb.newEnv(t, "ca")
		cfg := e.config(t, appPassword)
		cfg.Kafka.TLS = &tls.Config{MinVersion: tls.VersionTLS12} // system roots: the test CA is not among them
		app := newSpecApp(t, cfg)
		start := time.Now()
		_, done := testprocs.StartWatch(t, app)
		var err error
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			t.Fatal("Run with an untrusted broker certificate still runs after 60s")
		}
		t.Logf("untrusted certificate: Run returned after %v: %v", time.Since(start).Round(time.Millisecond), err)
		var ae *kstate.AuthenticationError
		if !errors.As(err, &ae) || ae.Code != "TLS" {
			t.Fatalf("Run = %v; want an *AuthenticationError TLS", err)
		}
	})
}

// outputsOf groups records as "key=value" lists per key.
func outputsOf(recs []kafka.Record) testprocs.Outputs {
	o := testprocs.Outputs{}
	for _, r := range recs {
		o[string(r.Key)] = append(o[string(r.Key)], string(r.Value))
	}
	return o
}
