package main

import (
	"os"

	"github.com/spf13/cobra"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
)

// securityFlags are the TLS and SASL flags of every command that talks to
// Kafka: the same settings as Options.Kafka.TLS and Options.Kafka.SASL.
type securityFlags struct {
	tls                       bool
	caFile, certFile, key     string
	mechanism, user, password string
}

func (f *securityFlags) add(cmd *cobra.Command) {
	fl := cmd.Flags()
	fl.BoolVar(&f.tls, "tls", false, "connect with TLS (the system's roots unless --tls-ca); implied by any --tls-* file")
	fl.StringVar(&f.caFile, "tls-ca", "", "PEM file of the certificates that sign the brokers' certificates")
	fl.StringVar(&f.certFile, "tls-cert", "", "PEM file of the client certificate (mutual TLS; with --tls-key)")
	fl.StringVar(&f.key, "tls-key", "", "PEM file of the client certificate's private key")
	fl.StringVar(&f.mechanism, "sasl-mechanism", "", "SASL mechanism: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (default: none)")
	fl.StringVar(&f.user, "sasl-user", "", "SASL user name")
	fl.StringVar(&f.password, "sasl-password", "", "SASL password (default: the KSTATE_SASL_PASSWORD environment variable, which keeps it out of the process list)")
}

// opts returns the franz-go options of the flags (none for plaintext).
func (f *securityFlags) opts() ([]kgo.Opt, error) {
	var opts []kgo.Opt
	if f.tls || f.caFile != "" || f.certFile != "" || f.key != "" {
		cfg, err := kstate.TLSConfigFromFiles(f.caFile, f.certFile, f.key)
		if err != nil {
			return nil, usageErr("%v", err)
		}
		opts = append(opts, kgo.DialTLSConfig(cfg))
	}
	password := f.password
	if password == "" {
		password = os.Getenv("KSTATE_SASL_PASSWORD")
	}
	mech, err := kstate.SASLFromStrings(f.mechanism, f.user, password)
	if err != nil {
		return nil, usageErr("%v", err)
	}
	if mech != nil {
		opts = append(opts, kgo.SASL(mech))
	}
	return opts, nil
}

// client returns the internal client configuration of brokers and the flags.
func (f *securityFlags) client(brokers []string) (kafka.ClientConfig, error) {
	opts, err := f.opts()
	return kafka.ClientConfig{Brokers: brokers, Extra: opts}, err
}
