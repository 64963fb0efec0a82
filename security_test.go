package kstate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl/plain"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

func TestSASLFromStrings(t *testing.T) {
	for _, m := range []string{"PLAIN", "scram-sha-256", " SCRAM-SHA-512 "} {
		mech, err := SASLFromStrings(m, "u", "p")
		if err != nil || mech == nil || mech.Name() != strings.ToUpper(strings.TrimSpace(m)) {
			t.Errorf("SASLFromStrings(%q) = %v, %v", m, mech, err)
		}
	}
	if mech, err := SASLFromStrings("", "", ""); mech != nil || err != nil {
		t.Errorf("empty mechanism: %v, %v; want no SASL", mech, err)
	}
	for _, bad := range [][2]string{{"GSSAPI", "u"}, {"PLAIN", ""}} {
		if _, err := SASLFromStrings(bad[0], bad[1], "p"); !errors.Is(err, ErrConfig) {
			t.Errorf("SASLFromStrings(%q, %q) = %v; want ErrConfig", bad[0], bad[1], err)
		}
	}
}

func TestTLSConfigFromFiles(t *testing.T) {
	dir := t.TempDir()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "c"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour), IsCA: true, BasicConstraintsValid: true}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	pk, _ := x509.MarshalPKCS8PrivateKey(key)
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cert := write("cert.pem", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}))
	keyFile := write("key.pem", pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pk}))
	cfg, err := TLSConfigFromFiles(cert, cert, keyFile)
	if err != nil || cfg.RootCAs == nil || len(cfg.Certificates) != 1 {
		t.Fatalf("TLSConfigFromFiles = %+v, %v", cfg, err)
	}
	if cfg, err := TLSConfigFromFiles("", "", ""); err != nil || cfg.RootCAs != nil || cfg.Certificates != nil {
		t.Fatalf("no files: %+v, %v; want system roots, no client certificate", cfg, err)
	}
	if _, err := TLSConfigFromFiles(keyFile, "", ""); err == nil {
		t.Error("a CA file without a certificate was accepted")
	}
	if _, err := TLSConfigFromFiles("", cert, ""); err == nil {
		t.Error("a certificate without a key was accepted")
	}
}

func TestPublicAuthErrors(t *testing.T) {
	cause := &kafka.AuthError{Operation: "Describe", ResourceType: kafka.ResourceTopic, Resource: "out",
		Code: "TOPIC_AUTHORIZATION_FAILED", Err: kerr.TopicAuthorizationFailed}
	app := &App[string, string, string]{cfg: config[string, string, string]{Inputs: []Input[string]{{Topic: "in"}}, OutputTopic: "out"}}
	err := app.neededPermission(publicError(errors.Join(errors.New("kstate: output topic"), cause)))
	var ae *AuthorizationError
	if !errors.As(err, &ae) || !errors.Is(err, ErrNotAuthorized) || !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Fatalf("publicError = %v", err)
	}
	want := `kstate: not authorized: Write on topic "out" (TOPIC_AUTHORIZATION_FAILED): grant it, see docs/OPERATIONS.md#acls`
	if err.Error() != want {
		t.Errorf("message\n got %s\nwant %s", err, want)
	}
	err = publicError(&kafka.AuthError{Code: "SASL_AUTHENTICATION_FAILED", Err: kerr.SaslAuthenticationFailed})
	var au *AuthenticationError
	if !errors.As(err, &au) || !errors.Is(err, ErrAuthentication) || errors.Is(err, ErrNotAuthorized) {
		t.Fatalf("publicError = %v", err)
	}
}

func TestKafkaOptionsChecked(t *testing.T) {
	base := Topology[string, string, string]{
		Inputs:       Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return nil },
		Output: Output[string, string]{
			Topic: "out",
			Serde: serde.String(),
		},
	}
	baseOpts := Options{
		ApplicationID: "a",
		Kafka: KafkaOptions{
			Brokers: []string{"127.0.0.1:1"},
		},
		State: StateOptions{
			Dir: t.TempDir(),
		},
	}
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		tls  *tls.Config
		ok   bool
	}{
		{"client id", []kgo.Opt{kgo.ClientID("x"), kgo.Rack("r")}, nil, true},
		{"group", []kgo.Opt{kgo.ConsumerGroup("g")}, nil, false},
		{"topics", []kgo.Opt{kgo.ConsumeTopics("t")}, nil, false},
		{"transactional id", []kgo.Opt{kgo.TransactionalID("x")}, nil, false},
		{"dialer with TLS", []kgo.Opt{kgo.Dialer((&net.Dialer{}).DialContext)}, &tls.Config{}, false},
		{"SASL twice", []kgo.Opt{kgo.SASL(plain.Auth{User: "u"}.AsMechanism())}, nil, false},
	} {
		o := baseOpts
		o.Kafka.ClientOptions, o.Kafka.TLS = tc.opts, tc.tls
		o.Kafka.SASL, _ = SASLFromStrings("PLAIN", "u", "p")
		_, err := New(base, o)
		if tc.ok != (err == nil) || (err != nil && !errors.Is(err, ErrConfig)) {
			t.Errorf("%s: New = %v; want ok=%v (or an ErrConfig)", tc.name, err, tc.ok)
		}
	}
}

// TestProducerGuaranteesAsserted (issue #28 item 2): a client option that
// weakens the producer's guarantees (acks other than all, idempotence off
// or cancellable) is refused by New with an ErrConfig saying what kstate
// needs, instead of a franz-go message or a weaker producer.
func TestProducerGuaranteesAsserted(t *testing.T) {
	base := Topology[string, string, string]{
		Inputs:       Topics(serde.String(), "in"),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, string, string] { return nil },
		Output:       Output[string, string]{Topic: "out", Serde: serde.String()},
	}
	o := Options{ApplicationID: "a", Kafka: KafkaOptions{Brokers: []string{"127.0.0.1:1"}}, State: StateOptions{Dir: t.TempDir()}}
	for _, tc := range []struct {
		name string
		opts []kgo.Opt
		want string // in the message; "" for ok
	}{
		{"acks all", []kgo.Opt{kgo.RequiredAcks(kgo.AllISRAcks())}, ""},
		{"leader ack", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck())}, "need acks=all"},
		{"no ack", []kgo.Opt{kgo.RequiredAcks(kgo.NoAck())}, "need acks=all"},
		{"leader ack, idempotence off", []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()}, "need acks=all"},
		{"idempotence off", []kgo.Opt{kgo.DisableIdempotentWrite()}, "need idempotence"},
		{"cancellable", []kgo.Opt{kgo.AllowIdempotentProduceCancellation()}, "need idempotence"},
	} {
		o.Kafka.ClientOptions = tc.opts
		_, err := New(base, o)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: New: %v", tc.name, err)
		case tc.want != "" && (!errors.Is(err, ErrConfig) || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), "Options.Kafka.ClientOptions")):
			t.Errorf("%s: New = %v; want an ErrConfig naming Options.Kafka.ClientOptions with %q", tc.name, err, tc.want)
		}
	}
}
