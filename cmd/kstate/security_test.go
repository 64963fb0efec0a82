package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// Bad TLS or SASL flags are usage errors (exit 2) naming the problem,
// before any connection.
func TestSecurityFlags(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"state", "metadata", "--brokers", "127.0.0.1:1", "--app", "a", "--sasl-mechanism", "GSSAPI", "--sasl-user", "u"}, "unknown SASL mechanism"},
		{[]string{"state", "metadata", "--brokers", "127.0.0.1:1", "--app", "a", "--sasl-mechanism", "SCRAM-SHA-512"}, "empty user name"},
		{[]string{"state", "read", "--brokers", "127.0.0.1:1", "--app", "a", "--var", "v", "--tls-ca", "/nonexistent/ca.pem"}, "TLS CA file"},
		{[]string{"reset", "--brokers", "127.0.0.1:1", "--app", "a", "--tls-cert", "c.pem"}, "need both a certificate file and a key file"},
	} {
		var out, errb bytes.Buffer
		code := runCLI(context.Background(), tc.args, &out, &errb)
		if code != exitUsage || !strings.Contains(errb.String(), tc.want) {
			t.Errorf("kstate %s: exit %d, stderr %q; want %d with %q", strings.Join(tc.args, " "), code, errb.String(), exitUsage, tc.want)
		}
	}
}
