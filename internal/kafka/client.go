package kafka

import (
	"crypto/tls"

	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/sasl"
)

// ClientConfig is what every franz-go client kstate creates is built from:
// the bootstrap brokers, TLS, SASL and the user's extra options. Opts is the
// one place the base options are assembled; each client appends its own
// options after them, so a client's own settings (isolation level,
// transactional id, group, partitioner...) win over Extra.
type ClientConfig struct {
	Brokers []string
	// TLS, when not nil, encrypts every connection (franz-go's DialTLSConfig).
	TLS *tls.Config
	// SASL, when not nil, authenticates every connection.
	SASL sasl.Mechanism
	// Extra are applied first, before TLS, SASL and the client's own options.
	Extra []kgo.Opt
}

// Opts returns Extra, then the seed brokers, TLS and SASL options.
func (c ClientConfig) Opts() []kgo.Opt {
	opts := append([]kgo.Opt(nil), c.Extra...)
	opts = append(opts, kgo.SeedBrokers(c.Brokers...))
	if c.TLS != nil {
		opts = append(opts, kgo.DialTLSConfig(c.TLS.Clone()))
	}
	if c.SASL != nil {
		opts = append(opts, kgo.SASL(c.SASL))
	}
	return opts
}

// clientConfig is Client with the session's brokers.
func (c SessionConfig) clientConfig() ClientConfig {
	cc := c.Client
	cc.Brokers = c.Brokers
	return cc
}
