package kstate

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"os"
	"strings"

	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/kstate/kstate/internal/kafka"
)

// TLSConfigFromFiles builds a client TLS configuration from PEM files, as
// brokers' operators hand them out: caFile holds the certificates that sign
// the brokers' certificates (empty: the system's roots), certFile and
// keyFile the client's certificate chain and private key for mutual TLS
// (both empty: no client certificate). The brokers' certificates must name
// the host of Options.Kafka.Brokers.
func TLSConfigFromFiles(caFile, certFile, keyFile string) (*tls.Config, error) {
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if caFile != "" {
		pem, err := os.ReadFile(caFile)
		if err != nil {
			return nil, fmt.Errorf("kstate: TLS CA file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("kstate: TLS CA file %q holds no PEM certificate", caFile)
		}
		cfg.RootCAs = pool
	}
	switch {
	case certFile != "" && keyFile != "":
		cert, err := tls.LoadX509KeyPair(certFile, keyFile)
		if err != nil {
			return nil, fmt.Errorf("kstate: TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	case certFile != "" || keyFile != "":
		return nil, fmt.Errorf("kstate: TLS client certificate: need both a certificate file and a key file (have %q and %q)", certFile, keyFile)
	}
	return cfg, nil
}

// SASLFromStrings builds a SASL mechanism from its Kafka name and
// credentials, for deployments configured by environment variables:
// mechanism is "PLAIN", "SCRAM-SHA-256" or "SCRAM-SHA-512" (case does not
// matter). An empty mechanism gives nil (no SASL). OAUTHBEARER needs a
// token source: build it with franz-go's sasl/oauth package instead.
func SASLFromStrings(mechanism, user, password string) (sasl.Mechanism, error) {
	m := strings.ToUpper(strings.TrimSpace(mechanism))
	if m == "" {
		return nil, nil
	}
	if user == "" {
		return nil, fmt.Errorf("%w: SASL %s: empty user name", ErrConfig, m)
	}
	switch m {
	case "PLAIN":
		return plain.Auth{User: user, Pass: password}.AsMechanism(), nil
	case "SCRAM-SHA-256":
		return scram.Auth{User: user, Pass: password}.AsSha256Mechanism(), nil
	case "SCRAM-SHA-512":
		return scram.Auth{User: user, Pass: password}.AsSha512Mechanism(), nil
	}
	return nil, fmt.Errorf("%w: unknown SASL mechanism %q (want PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512)", ErrConfig, mechanism)
}

// ErrNotAuthorized is wrapped by every *AuthorizationError.
var ErrNotAuthorized = errors.New("kstate: not authorized")

// ErrAuthentication is wrapped by every *AuthenticationError.
var ErrAuthentication = errors.New("kstate: authentication failed")

// AuthorizationError is a request the cluster refused for want of an ACL:
// it names the operation and the resource to grant the principal of
// Options.Kafka.SASL (or of the TLS client certificate). Run returns it at once;
// retrying cannot help. docs/OPERATIONS.md lists the ACLs kstate needs.
type AuthorizationError struct {
	Operation    string // ACL operation: "Read", "Write", "Describe", "Create", "DescribeConfigs", "IdempotentWrite"
	ResourceType string // "topic", "group", "transactional id" or "cluster"
	Resource     string // topic, group or transactional id; "kafka-cluster"; empty when unknown
	Code         string // Kafka's error, e.g. TOPIC_AUTHORIZATION_FAILED
	Err          error  // the client's error, naming the request
}

func (e *AuthorizationError) Error() string {
	what := fmt.Sprintf("%s on %s %q", e.Operation, e.ResourceType, e.Resource)
	if e.Resource == "" {
		what = fmt.Sprintf("%s on a %s", e.Operation, e.ResourceType)
	}
	return fmt.Sprintf("kstate: not authorized: %s (%s): grant it, see docs/OPERATIONS.md#acls", what, e.Code)
}

func (e *AuthorizationError) Unwrap() []error { return []error{ErrNotAuthorized, e.Err} }

// AuthenticationError is a connection the cluster (or the client) refused
// before any request: wrong SASL credentials or a mechanism the broker does
// not enable (Code SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM),
// or a failed TLS handshake (Code "TLS": a broker certificate not signed by
// Options.Kafka.TLS's roots or not naming the broker's host, a client certificate
// the broker rejects, a plaintext port). Run returns it at once.
type AuthenticationError struct {
	Code string
	Err  error
}

func (e *AuthenticationError) Error() string {
	hint := "check Options.Kafka.SASL's mechanism, user and password"
	if e.Code == "TLS" {
		hint = "check Options.Kafka.TLS (CA, client certificate) and that Options.Kafka.Brokers are the TLS listener"
	}
	return fmt.Sprintf("kstate: authentication failed (%s): %s: %v", e.Code, hint, e.Err)
}

func (e *AuthenticationError) Unwrap() []error { return []error{ErrAuthentication, e.Err} }

// authError converts internal/kafka's *AuthError; ok is false when err has
// none.
func authError(err error) (error, bool) {
	var ae *kafka.AuthError
	if !errors.As(err, &ae) {
		return nil, false
	}
	if ae.Authentication() {
		return &AuthenticationError{Code: ae.Code, Err: ae.Err}, true
	}
	return &AuthorizationError{Operation: ae.Operation, ResourceType: ae.ResourceType, Resource: ae.Resource, Code: ae.Code, Err: err}, true
}

// clientConfig is what every Kafka client of the App is built from.
func (c *config[K, I, O]) clientConfig() kafka.ClientConfig {
	return kafka.ClientConfig{Brokers: c.Brokers, TLS: c.TLS, SASL: c.SASL, Extra: c.KafkaOptions}
}

// neededPermission names, in a refused Describe of the input, output or
// dead-letter topic, the operation the App needs there: Read or Write,
// which imply Describe (granting Describe alone would only move the error
// to the next request).
func (a *App[K, I, O]) neededPermission(err error) error {
	var ae *AuthorizationError
	if !errors.As(err, &ae) || ae.Operation != "Describe" || ae.ResourceType != kafka.ResourceTopic || ae.Resource == "" {
		return err
	}
	switch ae.Resource {
	case a.cfg.inputTopics()[0]:
		ae.Operation = "Read"
	case a.cfg.OutputTopic, a.deadLetterTopic():
		ae.Operation = "Write"
	}
	return err
}
