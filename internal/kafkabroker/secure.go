package kafkabroker

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// SASLSSL configures a broker whose only client listener is SASL_SSL:
// SCRAM-SHA-512 over TLS, with the StandardAuthorizer enforcing ACLs and no
// access where no ACL allows it. The super user "admin" is the broker's own
// (inter-broker) principal. The controller listener stays PLAINTEXT on
// 127.0.0.1 and is not advertised; its principal, User:ANONYMOUS, is a super
// user too because the combined node's broker registers with its controller
// over it.
type SASLSSL struct {
	// CertPEM is the broker's certificate chain; it must name 127.0.0.1.
	CertPEM []byte
	// KeyPEM is the broker's unencrypted PKCS#8 private key ("PRIVATE KEY").
	KeyPEM []byte
	// CAPEM signs CertPEM (the broker trusts it to reach itself).
	CAPEM []byte
	// AdminPassword is the SCRAM-SHA-512 password of User:admin.
	AdminPassword string
	// Users are more SCRAM-SHA-512 users (name → password), without ACLs.
	Users map[string]string
}

// scramPassword rejects what cannot be written into a JAAS line or a
// --add-scram argument unquoted.
func scramPassword(s string) error {
	if s == "" || strings.ContainsAny(s, "\\\"',=[]; \n") {
		return fmt.Errorf("kafkabroker: SCRAM password %q: want a non-empty password without quotes, commas, '=', brackets, ';', spaces", s)
	}
	return nil
}

func (s *SASLSSL) config(dir string, port, cport int) (string, error) {
	if len(s.CertPEM) == 0 || len(s.KeyPEM) == 0 || len(s.CAPEM) == 0 {
		return "", errors.New("kafkabroker: SASLSSL needs CertPEM, KeyPEM and CAPEM")
	}
	if err := scramPassword(s.AdminPassword); err != nil {
		return "", err
	}
	for name, pw := range s.Users {
		if err := scramPassword(pw); err != nil {
			return "", err
		}
		if err := scramPassword(name); err != nil || name == "admin" {
			return "", fmt.Errorf("kafkabroker: SCRAM user name %q", name)
		}
	}
	// A PEM key store file holds the private key and the certificate chain.
	keystore := filepath.Join(dir, "broker-keystore.pem")
	truststore := filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(keystore, append(append([]byte{}, s.KeyPEM...), s.CertPEM...), 0o600); err != nil {
		return "", err
	}
	if err := os.WriteFile(truststore, s.CAPEM, 0o644); err != nil {
		return "", err
	}
	lines := []string{
		"process.roles=broker,controller",
		"node.id=1",
		fmt.Sprintf("controller.quorum.voters=1@127.0.0.1:%d", cport),
		fmt.Sprintf("listeners=SASL_SSL://127.0.0.1:%d,CONTROLLER://127.0.0.1:%d", port, cport),
		fmt.Sprintf("advertised.listeners=SASL_SSL://127.0.0.1:%d", port),
		"controller.listener.names=CONTROLLER",
		"inter.broker.listener.name=SASL_SSL",
		"listener.security.protocol.map=CONTROLLER:PLAINTEXT,SASL_SSL:SASL_SSL",
		"sasl.enabled.mechanisms=SCRAM-SHA-512",
		"sasl.mechanism.inter.broker.protocol=SCRAM-SHA-512",
		fmt.Sprintf(`listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="%s";`, s.AdminPassword),
		"ssl.keystore.type=PEM",
		"ssl.keystore.location=" + keystore,
		"ssl.truststore.type=PEM",
		"ssl.truststore.location=" + truststore,
		"ssl.client.auth=none",
		"authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
		"super.users=User:admin;User:ANONYMOUS",
		"allow.everyone.if.no.acl.found=false",
	}
	return strings.Join(append(lines, commonConfig(dir)...), "\n"), nil
}

// scramArgs are the StorageTool format arguments that create the SCRAM
// credentials in the initial metadata.
func (s *SASLSSL) scramArgs() []string {
	args := []string{"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=admin,password=%s]", s.AdminPassword)}
	names := make([]string, 0, len(s.Users))
	for name := range s.Users {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		args = append(args, "--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", name, s.Users[name]))
	}
	return args
}
