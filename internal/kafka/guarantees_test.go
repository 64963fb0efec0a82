package kafka

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestTransactionalClientGuarantees checks what kstate relies on rather
// than assumes (issue #28 item 2): franz-go gives a transactional client
// acks=all and idempotent writes, and refuses options that would weaken
// them; checkGuarantees holds them to it.
func TestTransactionalClientGuarantees(t *testing.T) {
	txn := []kgo.Opt{kgo.SeedBrokers("127.0.0.1:1"), kgo.TransactionalID("t")}
	cl, err := kgo.NewClient(txn...)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGuarantees(cl); err != nil {
		t.Errorf("a transactional client with franz-go's defaults: %v", err)
	}
	cl.Close()
	for _, o := range []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite(), kgo.AllowIdempotentProduceCancellation()} {
		if cl, err := kgo.NewClient(append(txn, o)...); err == nil {
			cl.Close()
			t.Errorf("franz-go accepted %v on a transactional client", o)
		}
	}
	// A non-transactional client can be weakened: checkGuarantees catches it.
	for _, o := range []kgo.Opt{kgo.DisableIdempotentWrite(), kgo.AllowIdempotentProduceCancellation()} {
		cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), o)
		if err != nil {
			t.Fatal(err)
		}
		if err := checkGuarantees(cl); !errors.Is(err, errNoIdempotence) {
			t.Errorf("%v: checkGuarantees = %v", o, err)
		}
		cl.Close()
	}
	cl, err = kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"), kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.LeaderAck()))
	if err != nil {
		t.Fatal(err)
	}
	if err := checkGuarantees(cl); !errors.Is(err, errNotAllAcks) {
		t.Errorf("leader acks: checkGuarantees = %v", err)
	}
	cl.Close()
}

// TestSessionRefusesWeakProducer: a session (and a re-seed's producer)
// built with an extra option that weakens the producer fails at
// construction, whatever the extra option passes through.
func TestSessionRefusesWeakProducer(t *testing.T) {
	for _, o := range []kgo.Opt{kgo.RequiredAcks(kgo.LeaderAck()), kgo.DisableIdempotentWrite()} {
		cc := ClientConfig{Brokers: []string{"127.0.0.1:1"}, Extra: []kgo.Opt{o}}
		s, err := NewSession(SessionConfig{Brokers: cc.Brokers, Client: cc, GroupID: "g", Topics: []string{"in"}})
		if err == nil {
			s.Close()
			t.Errorf("%v: NewSession succeeded", o)
		}
		if _, err := cc.WriteTransaction(t.Context(), "x", time.Second, []Record{{Topic: "t"}}); err == nil || !strings.Contains(err.Error(), "new transactional producer") {
			t.Errorf("%v: WriteTransaction = %v", o, err)
		}
	}
}
