package kafka

import (
	"crypto/tls"
	"errors"

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

// Check builds (and closes at once, before any connection) a client from
// c, so that conflicting options (a kgo.Dialer with TLS...) are reported
// before Run, and refuses Extra options that would turn every client into a
// consumer or a transactional producer: kstate sets those per client.
func (c ClientConfig) Check() error {
	cl, err := kgo.NewClient(c.Opts()...)
	if err != nil {
		// franz-go refuses acks other than all with idempotence on: say
		// what kstate needs instead of "idempotency requires acks=all".
		if probe, perr := kgo.NewClient(append(c.Opts(), kgo.DisableIdempotentWrite())...); perr == nil {
			acks, _ := probe.OptValue(kgo.RequiredAcks).(kgo.Acks)
			probe.Close()
			if acks != kgo.AllISRAcks() {
				return errNotAllAcks
			}
		}
		return err
	}
	defer cl.Close()
	if err := checkGuarantees(cl); err != nil {
		return err
	}
	topics, _ := cl.OptValue(kgo.ConsumeTopics).([]string)
	parts, _ := cl.OptValue(kgo.ConsumePartitions).(map[string]map[int32]kgo.Offset)
	regex, _ := cl.OptValue(kgo.ConsumeRegex).(bool)
	if cl.OptValue(kgo.ConsumerGroup) != "" || cl.OptValue(kgo.TransactionalID) != "" || len(topics) > 0 || len(parts) > 0 || regex {
		return errors.New("an extra option sets ConsumerGroup, ConsumeTopics, ConsumePartitions, ConsumeRegex or TransactionalID: " +
			"kstate sets them on the clients that need them; they would apply to every client")
	}
	// kgo.SASL adds mechanisms rather than replacing them: one in Extra
	// would be tried before c.SASL.
	if mechs, _ := cl.OptValue(kgo.SASL).([]sasl.Mechanism); c.SASL != nil && len(mechs) > 1 {
		return errors.New("SASL is set both as an extra option and in the config: set it once")
	}
	return nil
}

// errNotAllAcks and errNoIdempotence are a client option that weakens the
// producer's guarantees (Check, checkGuarantees).
var (
	errNotAllAcks = errors.New("an extra option sets RequiredAcks to other than AllISRAcks: " +
		"kstate's writes (outputs, changelog, dead letters) need acks=all, each acknowledged by every in-sync replica, " +
		"so that a broker's loss cannot lose a committed batch: remove the option")
	errNoIdempotence = errors.New("an extra option turns idempotent writes off (DisableIdempotentWrite) or lets them be cancelled " +
		"(AllowIdempotentProduceCancellation): kstate's transactional writes need idempotence, " +
		"so that a retried write is never duplicated: remove the option")
)

// checkGuarantees asserts what exactly-once needs of a producing client,
// rather than assuming franz-go's defaults: acks=all and idempotent writes
// that cannot be cancelled.
func checkGuarantees(cl *kgo.Client) error {
	if acks, _ := cl.OptValue(kgo.RequiredAcks).(kgo.Acks); acks != kgo.AllISRAcks() {
		return errNotAllAcks
	}
	off, _ := cl.OptValue(kgo.DisableIdempotentWrite).(bool)
	cancel, _ := cl.OptValue(kgo.AllowIdempotentProduceCancellation).(bool)
	if off || cancel {
		return errNoIdempotence
	}
	return nil
}
