package kafka

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"testing"

	"github.com/twmb/franz-go/pkg/kerr"
)

func TestAccessClassify(t *testing.T) {
	a := access{topicOp: "Write", topic: "app-changelog", group: "app", txnID: "app-i1"}
	for _, tc := range []struct {
		err                error
		op, typ, res, code string
	}{
		{kerr.TopicAuthorizationFailed, "Write", ResourceTopic, "app-changelog", "TOPIC_AUTHORIZATION_FAILED"},
		{kerr.GroupAuthorizationFailed, "Read", ResourceGroup, "app", "GROUP_AUTHORIZATION_FAILED"},
		{kerr.TransactionalIDAuthorizationFailed, "Write", ResourceTransactionalID, "app-i1", "TRANSACTIONAL_ID_AUTHORIZATION_FAILED"},
		{kerr.ClusterAuthorizationFailed, "IdempotentWrite", ResourceCluster, "kafka-cluster", "CLUSTER_AUTHORIZATION_FAILED"},
		{kerr.SaslAuthenticationFailed, "", "", "", "SASL_AUTHENTICATION_FAILED"},
		{&tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}, "", "", "", "TLS"},
		{tls.RecordHeaderError{Msg: "first record does not look like a TLS handshake"}, "", "", "", "TLS"},
	} {
		wrapped := fmt.Errorf("kafka: some request: %w", tc.err)
		got := a.classify(wrapped)
		var ae *AuthError
		if !errors.As(got, &ae) {
			t.Fatalf("classify(%v) = %v, not an *AuthError", tc.err, got)
		}
		if ae.Operation != tc.op || ae.ResourceType != tc.typ || ae.Resource != tc.res || ae.Code != tc.code {
			t.Errorf("classify(%v) = %+v; want %s %s %q %s", tc.err, ae, tc.op, tc.typ, tc.res, tc.code)
		}
		if !errors.Is(got, tc.err) && tc.code != "TLS" {
			t.Errorf("classify(%v) lost the cause", tc.err)
		}
		if !isAuthErr(got) || IsUnreachable(got) {
			t.Errorf("%v: isAuthErr %v, IsUnreachable %v", got, isAuthErr(got), IsUnreachable(got))
		}
		if again := (access{topicOp: "Read"}).classify(got); again != got {
			t.Errorf("a classified error was classified again: %v", again)
		}
	}
	for _, err := range []error{nil, io.EOF, kerr.NotLeaderForPartition, ErrTopicNotFound} {
		if got := a.classify(err); got != err {
			t.Errorf("classify(%v) = %v; want it unchanged", err, got)
		}
	}
	// Default operations when the request names none.
	var ae *AuthError
	if !errors.As(access{}.classify(kerr.TopicAuthorizationFailed), &ae) || ae.Permission() != "Describe on a topic" {
		t.Errorf("default topic permission: %v", ae)
	}
}
