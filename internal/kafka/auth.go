package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/twmb/franz-go/pkg/kerr"
)

// AuthError is a request the cluster refused: an authorization failure
// (a missing ACL), naming the operation and the resource the ACL must
// allow, or an authentication failure (Operation empty: wrong SASL
// credentials or mechanism, a TLS handshake that failed). Retrying does
// not help; an operator must act.
type AuthError struct {
	// Operation is the ACL operation that was refused: "Read", "Write",
	// "Describe", "Create", "DescribeConfigs", "IdempotentWrite"; empty for
	// an authentication failure.
	Operation string
	// ResourceType is "topic", "group", "transactional id" or "cluster".
	ResourceType string
	// Resource is the topic, group or transactional id; "kafka-cluster"
	// for the cluster; empty when unknown.
	Resource string
	// Code is the Kafka error name (TOPIC_AUTHORIZATION_FAILED,
	// SASL_AUTHENTICATION_FAILED...) or "TLS" for a handshake failure.
	Code string
	// Err is the client's error.
	Err error
}

// Authentication reports whether e is an authentication failure rather
// than a missing ACL.
func (e *AuthError) Authentication() bool { return e.Operation == "" }

func (e *AuthError) Error() string {
	if e.Authentication() {
		return fmt.Sprintf("kafka: authentication failed (%s): %v", e.Code, e.Err)
	}
	return fmt.Sprintf("kafka: not authorized: %s (%s): %v", e.Permission(), e.Code, e.Err)
}

// Permission is the refused permission: `Write on topic "x"`.
func (e *AuthError) Permission() string {
	if e.Resource == "" {
		return fmt.Sprintf("%s on a %s", e.Operation, e.ResourceType)
	}
	return fmt.Sprintf("%s on %s %q", e.Operation, e.ResourceType, e.Resource)
}

func (e *AuthError) Unwrap() error { return e.Err }

// Resource types of AuthError.
const (
	ResourceTopic           = "topic"
	ResourceGroup           = "group"
	ResourceTransactionalID = "transactional id"
	ResourceCluster         = "cluster"
)

// access says what a request needed, to name the permission an
// authorization failure refused: the broker's error code gives the resource
// type, the request the operation and the name.
type access struct {
	topicOp, topic string
	groupOp, group string
	txnID          string
	clusterOp      string
}

// classify returns err as an *AuthError when it is an authorization or
// authentication failure (or already one), and err unchanged otherwise.
func (a access) classify(err error) error {
	if err == nil {
		return nil
	}
	var ae *AuthError
	if errors.As(err, &ae) {
		return err
	}
	var ke *kerr.Error
	switch {
	case errors.Is(err, kerr.TopicAuthorizationFailed):
		ae = &AuthError{Operation: or(a.topicOp, "Describe"), ResourceType: ResourceTopic, Resource: a.topic}
	case errors.Is(err, kerr.GroupAuthorizationFailed):
		ae = &AuthError{Operation: or(a.groupOp, "Read"), ResourceType: ResourceGroup, Resource: a.group}
	case errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		ae = &AuthError{Operation: "Write", ResourceType: ResourceTransactionalID, Resource: a.txnID}
	case errors.Is(err, kerr.ClusterAuthorizationFailed):
		ae = &AuthError{Operation: or(a.clusterOp, "IdempotentWrite"), ResourceType: ResourceCluster, Resource: "kafka-cluster"}
	case errors.Is(err, kerr.SaslAuthenticationFailed), errors.Is(err, kerr.UnsupportedSaslMechanism),
		errors.Is(err, kerr.IllegalSaslState):
		ae = &AuthError{}
	case isTLSError(err):
		ae = &AuthError{Code: "TLS", Err: err}
		return ae
	default:
		return err
	}
	if errors.As(err, &ke) {
		ae.Code = ke.Message
	}
	ae.Err = err
	return ae
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

// isTLSError reports whether err is a failed TLS handshake: a certificate
// the client does not trust (or the server rejected ours), a TLS alert, or
// a server that does not speak TLS on that port. None heals by retrying.
func isTLSError(err error) bool {
	var (
		verify  *tls.CertificateVerificationError
		alert   tls.AlertError
		header  tls.RecordHeaderError
		unknown x509.UnknownAuthorityError
		host    x509.HostnameError
		invalid x509.CertificateInvalidError
	)
	return errors.As(err, &verify) || errors.As(err, &alert) || errors.As(err, &header) ||
		errors.As(err, &unknown) || errors.As(err, &host) || errors.As(err, &invalid)
}
