package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/testlog"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

func TestPartitioner(t *testing.T) {
	tp := newPartitioner().ForTopic("t")
	byKey := kgo.StickyKeyPartitioner(nil).ForTopic("t")
	for i := range 50 {
		key := fmt.Appendf(nil, "key-%d", i)
		r := &kgo.Record{Key: key, Partition: AnyPartition}
		if got, want := tp.Partition(r, 7), byKey.Partition(&kgo.Record{Key: key}, 7); got != want {
			t.Fatalf("key %s: partition %d, Kafka's murmur2 says %d", key, got, want)
		}
	}
	for _, p := range []int32{0, 3, 6} {
		if got := tp.Partition(&kgo.Record{Key: []byte("k"), Partition: p}, 7); got != int(p) {
			t.Fatalf("explicit partition %d: got %d", p, got)
		}
		if !tp.RequiresConsistency(&kgo.Record{Partition: p}) {
			t.Fatal("an explicit partition must not be moved to another one")
		}
	}
}

func TestClassifyPollError(t *testing.T) {
	s := &Session{cfg: SessionConfig{GroupID: "g"}, log: testlog.New(t)}
	cases := []struct {
		name string
		fe   kgo.FetchError
		want error // nil: skipped; errAny: some error
	}{
		{"poll timeout", kgo.FetchError{Topic: "", Partition: -1, Err: context.DeadlineExceeded}, nil},
		{"rebalance", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.RebalanceInProgress}}, nil},
		{"illegal generation", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.IllegalGeneration}}, nil},
		{"unknown member", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.UnknownMemberID}}, nil},
		{"coordinator moved", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.NotCoordinator}}, nil},
		{"leader moved", kgo.FetchError{Topic: "in", Partition: 2, Err: kerr.NotLeaderForPartition}, nil},
		{"data loss", kgo.FetchError{Topic: "in", Partition: 2, Err: &kgo.ErrDataLoss{Topic: "in", Partition: 2}}, nil},
		{"closed", kgo.FetchError{Err: kgo.ErrClientClosed}, ErrClosed},
		{"fenced instance", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.FencedInstanceID}}, ErrFenced},
		{"group auth", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.GroupAuthorizationFailed}}, kerr.GroupAuthorizationFailed},
		{"topic auth", kgo.FetchError{Topic: "in", Partition: 0, Err: kerr.TopicAuthorizationFailed}, kerr.TopicAuthorizationFailed},
		{"bad session timeout", kgo.FetchError{Err: &kgo.ErrGroupSession{Err: kerr.InvalidSessionTimeout}}, kerr.InvalidSessionTimeout},
		{"unsupported compression", kgo.FetchError{Topic: "in", Partition: 0, Err: kerr.UnsupportedCompressionType}, kerr.UnsupportedCompressionType},
		{"broker gone", kgo.FetchError{Topic: "in", Partition: 0, Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := s.classifyPollError(tc.fe)
			if tc.want == nil {
				if err != nil {
					t.Fatalf("got %v, want the error skipped", err)
				}
				return
			}
			if !errors.Is(err, tc.want) {
				t.Fatalf("got %v, want %v", err, tc.want)
			}
		})
	}
}

// TestIsUnreachable: connection-level failures are unreachable (the
// coordinator rejoins); a closed client, fencing, authorization and
// answers that retrying cannot change are not.
func TestIsUnreachable(t *testing.T) {
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	for _, err := range []error{
		fmt.Errorf("unable to dial: %w", refused),
		wrapTxnErr("end transaction", "app-a", fmt.Errorf("unable to dial: %w", refused)),
		io.EOF, io.ErrUnexpectedEOF, syscall.ECONNRESET, syscall.EPIPE,
		&net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded},
		kerr.CoordinatorNotAvailable, kerr.NotCoordinator,
	} {
		if !IsUnreachable(err) {
			t.Errorf("%v: want unreachable", err)
		}
	}
	for _, err := range []error{
		nil, kgo.ErrClientClosed, wrapTxnErr("end transaction", "app-a", kgo.ErrClientClosed), ErrClosed,
		wrapTxnErr("end transaction", "app-a", kerr.ProducerFenced), kerr.InvalidTxnState,
		kerr.TopicAuthorizationFailed, kerr.MessageTooLarge, context.Canceled,
	} {
		if IsUnreachable(err) {
			t.Errorf("%v: want not unreachable", err)
		}
	}
	if !IsConnectionError(fmt.Errorf("unable to dial: %w", refused)) || IsConnectionError(kerr.UnknownTopicOrPartition) || IsConnectionError(kgo.ErrClientClosed) {
		t.Error("IsConnectionError: want dial errors only, not Kafka error codes nor a closed client")
	}
}

// A fence met by a transaction during which a broker could not be
// reached (a connection that would not open, or an established one that
// broke) is the broker aborting it for its timeout: unreachable (the
// coordinator rejoins), not ErrFenced. Without a failed connection it is
// fencing.
func TestWrapTxnErrAfterOutage(t *testing.T) {
	for _, broke := range []struct {
		name string
		note func(s *Session)
	}{
		{"connection refused", func(s *Session) {
			connHook{s}.OnBrokerConnect(kgo.BrokerMetadata{}, 0, nil, syscall.ECONNREFUSED)
		}},
		// Case (b) of the cluster run: SIGKILL of the transaction
		// coordinator's broker breaks an established connection (issue #28).
		{"established connection reset", func(s *Session) {
			connHook{s}.OnBrokerE2E(kgo.BrokerMetadata{}, 26, kgo.BrokerE2E{ReadErr: syscall.ECONNRESET})
		}},
		{"established connection EOF", func(s *Session) {
			connHook{s}.OnBrokerE2E(kgo.BrokerMetadata{}, 0, kgo.BrokerE2E{WriteErr: io.EOF})
		}},
	} {
		t.Run(broke.name, func(t *testing.T) {
			s := &Session{cfg: SessionConfig{GroupID: "g", TransactionalID: "g-i1", TransactionTimeout: 10 * time.Second}}
			s.watch.begin(time.Now())
			if err := s.wrapTxnErr("produce", "out", kerr.InvalidProducerEpoch); !errors.Is(err, ErrFenced) || IsUnreachable(err) {
				t.Fatalf("%v: want ErrFenced without an outage", err)
			}
			// This side's own ends are no outage.
			connHook{s}.OnBrokerE2E(kgo.BrokerMetadata{}, 1, kgo.BrokerE2E{ReadErr: context.Canceled})
			connHook{s}.OnBrokerE2E(kgo.BrokerMetadata{}, 1, kgo.BrokerE2E{ReadErr: net.ErrClosed})
			if err := s.wrapTxnErr("produce", "out", kerr.InvalidProducerEpoch); !errors.Is(err, ErrFenced) {
				t.Fatalf("%v: want ErrFenced after this side closed connections", err)
			}
			broke.note(s)
			err := s.wrapTxnErr("produce", "out", kerr.InvalidProducerEpoch)
			if errors.Is(err, ErrFenced) || !IsConnectionError(err) || !errors.Is(err, ErrTxnLostInOutage) {
				t.Fatalf("%v: want ErrTxnLostInOutage, a connection error, not ErrFenced", err)
			}
			s.watch.begin(time.Now().Add(time.Millisecond)) // the next transaction: the outage was before it
			if err := s.wrapTxnErr("produce", "out", kerr.ProducerFenced); !errors.Is(err, ErrFenced) {
				t.Fatalf("%v: want ErrFenced for a later transaction", err)
			}
		})
	}
}

// TestWrapTxnErrAfterTimeout: a fence met by a transaction open for its whole
// TransactionTimeout is an outage when the process ran throughout and its
// writes waited on the brokers (min.insync.replicas lost: NOT_ENOUGH_REPLICAS
// retried until the broker aborted the transaction), and fencing when the
// process did not run meanwhile (frozen past its timeout: a zombie), even
// with a connection failure seen after it resumed.
func TestWrapTxnErrAfterTimeout(t *testing.T) {
	const timeout = time.Second
	s := &Session{cfg: SessionConfig{GroupID: "g", TransactionalID: "g-i1", TransactionTimeout: timeout}}
	began := time.Now().Add(-1100 * time.Millisecond)
	s.watch.begin(began) // no tick since: frozen
	err := s.wrapTxnErr("end transaction", "", kerr.ProducerFenced)
	if !errors.Is(err, ErrFenced) || errors.Is(err, ErrTxnLostInOutage) || !strings.Contains(err.Error(), "did not run") {
		t.Fatalf("%v: want ErrFenced naming the freeze for a process that did not run", err)
	}
	s.connFailed.Store(time.Now().UnixNano())
	if err := s.wrapTxnErr("end transaction", "", kerr.ProducerFenced); !errors.Is(err, ErrFenced) {
		t.Fatalf("%v: want ErrFenced for a frozen process, even after a connection failure", err)
	}

	s = &Session{cfg: SessionConfig{GroupID: "g", TransactionalID: "g-i1", TransactionTimeout: timeout}}
	s.watch.begin(began)
	s.watch.enter(began) // a produce retried NOT_ENOUGH_REPLICAS throughout
	for at := began; time.Since(at) > 0; at = at.Add(watchTick) {
		s.watch.tick(at)
	}
	err = s.wrapTxnErr("produce to topic \"out\" partition 0", "out", kerr.InvalidProducerEpoch)
	if errors.Is(err, ErrFenced) || !errors.Is(err, ErrTxnLostInOutage) || !IsUnreachable(err) || !strings.Contains(err.Error(), "min.insync.replicas") {
		t.Fatalf("%v: want ErrTxnLostInOutage naming min.insync.replicas for a live process whose writes waited", err)
	}
}

// TestTxnWatchVerdict: the classification of a fence by what the process
// did during the transaction (txnwatch.go).
func TestTxnWatchVerdict(t *testing.T) {
	const timeout = 10 * time.Second
	t0 := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	type step struct {
		at   time.Duration // since t0
		what string        // "tick", "enter", "leave"
	}
	// run ticks every watchTick from..to, with a call in flight when busy.
	run := func(from, to time.Duration, busy bool) []step {
		var st []step
		if busy {
			st = append(st, step{from, "enter"})
		}
		for at := from; at <= to; at += watchTick {
			st = append(st, step{at, "tick"})
		}
		if busy {
			st = append(st, step{to, "leave"})
		}
		return st
	}
	cat := func(parts ...[]step) []step {
		var st []step
		for _, p := range parts {
			st = append(st, p...)
		}
		return st
	}
	for _, tc := range []struct {
		name       string
		steps      []step
		fenced     time.Duration // when the fence is met
		connFailed time.Duration // 0: none; <0: before the transaction
		outage     bool
		why        string
	}{
		{name: "writes refused for the whole timeout (min ISR lost)", steps: run(0, 10500*time.Millisecond, true),
			fenced: 10500 * time.Millisecond, outage: true, why: "NOT_ENOUGH_REPLICAS"},
		{name: "user code slower than the timeout, no Kafka call waiting", steps: run(0, 10500*time.Millisecond, false),
			fenced: 10500 * time.Millisecond},
		{name: "writes waited for a third of the timeout only", steps: cat(run(0, 7*time.Second, false), run(7*time.Second, 10500*time.Millisecond, true)),
			fenced: 10500 * time.Millisecond},
		{name: "frozen after its produce (SIGSTOP), resumed into End", steps: cat(run(0, time.Second, true), run(11*time.Second, 11500*time.Millisecond, true)),
			fenced: 11500 * time.Millisecond, why: "did not run"},
		{name: "frozen, fenced before its first tick after resuming", steps: run(0, 2*time.Second, true),
			fenced: 12 * time.Second, why: "did not run"},
		{name: "frozen, then a connection broke", steps: cat(run(0, time.Second, true), run(11*time.Second, 11500*time.Millisecond, true)),
			fenced: 11500 * time.Millisecond, connFailed: 11200 * time.Millisecond, why: "did not run"},
		{name: "a connection broke during the transaction", steps: run(0, 3*time.Second, true),
			fenced: 3 * time.Second, connFailed: time.Second, outage: true, why: "connection"},
		{name: "a connection broke before the transaction", steps: run(0, 3*time.Second, true),
			fenced: 3 * time.Second, connFailed: -time.Second},
		{name: "a young transaction fenced by a newer instance", steps: run(0, 3*time.Second, true),
			fenced: 3 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var w txnWatch
			w.tick(t0.Add(-watchTick))
			w.begin(t0)
			for _, st := range tc.steps {
				at := t0.Add(st.at)
				switch st.what {
				case "tick":
					w.tick(at)
				case "enter":
					w.enter(at)
				case "leave":
					w.leave(at)
				}
			}
			var failed time.Time
			if tc.connFailed != 0 {
				failed = t0.Add(tc.connFailed)
			}
			outage, why := w.verdict(t0.Add(tc.fenced), timeout, failed)
			if outage != tc.outage || !strings.Contains(why, tc.why) || (tc.why == "" && why != "") {
				t.Fatalf("verdict = %v, %q; want %v, %q", outage, why, tc.outage, tc.why)
			}
		})
	}
}

// TestIsRetriable: the errors issue #28 lists are retriable (the batch is
// redone), fencing, authorization, a gone topic and plain failures are not.
func TestIsRetriable(t *testing.T) {
	for _, err := range []error{kerr.NotEnoughReplicas, kerr.NotEnoughReplicasAfterAppend, kerr.NotLeaderForPartition,
		kerr.CoordinatorNotAvailable, kerr.NotCoordinator, kerr.CoordinatorLoadInProgress, kerr.ConcurrentTransactions,
		kerr.RequestTimedOut, kerr.TransactionAbortable, kerr.KafkaStorageError, kerr.OutOfOrderSequenceNumber,
		fmt.Errorf("kafka: end transaction: %w", kerr.NotCoordinator)} {
		if !IsRetriable(err) {
			t.Errorf("%v: not retriable", err)
		}
	}
	for _, err := range []error{nil, kerr.UnknownTopicOrPartition, kerr.UnknownTopicID, kerr.ProducerFenced, kerr.InvalidProducerEpoch,
		kerr.TopicAuthorizationFailed, kerr.MessageTooLarge, kerr.InvalidTxnState, ErrFenced, errors.New("x")} {
		if IsRetriable(err) {
			t.Errorf("%v: retriable", err)
		}
	}
}

func TestWrapTxnErr(t *testing.T) {
	for _, cause := range []error{kerr.ProducerFenced, kerr.InvalidProducerEpoch, fmt.Errorf("producer ID has a fatal, unrecoverable error, err: %w", kerr.ProducerFenced)} {
		err := wrapTxnErr("end transaction", "app-a", cause)
		if !errors.Is(err, ErrFenced) || !errors.Is(err, cause) {
			t.Fatalf("%v: want ErrFenced wrapping the cause", err)
		}
	}
	if err := wrapTxnErr("produce", "app-a", kerr.MessageTooLarge); errors.Is(err, ErrFenced) || !errors.Is(err, kerr.MessageTooLarge) {
		t.Fatalf("%v: a plain error must not read as fenced", err)
	}
}

// TestDeliver: events queued by the group goroutine reach the callbacks in
// order, OnRevoked stands in for a missing OnLost, and Poll's ownership set
// follows them.
func TestDeliver(t *testing.T) {
	var calls []string
	rec := func(what string) func(context.Context, []Partition) {
		return func(_ context.Context, ps []Partition) { calls = append(calls, fmt.Sprint(what, ps)) }
	}
	s := &Session{cfg: SessionConfig{GroupID: "g", OnAssigned: rec("assigned"), OnRevoked: rec("revoked")},
		log: testlog.New(t), owned: map[Partition]struct{}{}, fence: newGenerationFence()}
	s.enqueue(evAssigned, map[string][]int32{"b": {1}, "a": {2, 0}})
	s.enqueue(evRevoked, map[string][]int32{}) // cooperative no-op revoke: not delivered
	s.enqueue(evRevoked, map[string][]int32{"a": {2}})
	s.enqueue(evLost, map[string][]int32{"b": {1}})
	s.deliver(context.Background())
	want := []string{"assigned[{a 0} {a 2} {b 1}]", "revoked[{a 2}]", "revoked[{b 1}]"}
	if !slices.Equal(calls, want) {
		t.Fatalf("calls %v, want %v", calls, want)
	}
	if _, ok := s.owned[Partition{"a", 0}]; !ok || len(s.owned) != 1 {
		t.Fatalf("owned %v, want only a/0", s.owned)
	}
}

// TestGenerationFence: an offset-less commit gets exactly one unchanged
// offset of an owned partition; a commit with offsets is left alone; what
// was committed becomes the new fence, never for a partition given away.
func TestGenerationFence(t *testing.T) {
	f := newGenerationFence()
	req := func() *kmsg.TxnOffsetCommitRequest {
		r := kmsg.NewPtrTxnOffsetCommitRequest()
		r.MemberID = "m"
		return r
	}

	r := req()
	_ = f.preCommit(r)
	if len(r.Topics) != 0 {
		t.Fatal("fenced with no known committed offset")
	}

	f.assigned([]Partition{{"in", 0}, {"in", 1}})
	resp := kmsg.NewPtrOffsetFetchResponse()
	g := kmsg.NewOffsetFetchResponseGroup()
	tp := kmsg.NewOffsetFetchResponseGroupTopic()
	tp.Topic = "in"
	for p, off := range []int64{-1, 42} {
		pp := kmsg.NewOffsetFetchResponseGroupTopicPartition()
		pp.Partition, pp.Offset, pp.LeaderEpoch = int32(p), off, 3
		tp.Partitions = append(tp.Partitions, pp)
	}
	g.Topics = append(g.Topics, tp)
	resp.Groups = append(resp.Groups, g)
	_ = f.onFetched(context.Background(), nil, resp)

	r = req()
	_ = f.preCommit(r)
	if len(r.Topics) != 1 || r.Topics[0].Topic != "in" || len(r.Topics[0].Partitions) != 1 {
		t.Fatalf("fence request %+v, want one partition", r.Topics)
	}
	if p := r.Topics[0].Partitions[0]; p.Partition != 1 || p.Offset != 42 || p.LeaderEpoch != 3 || *p.Metadata != "m" {
		t.Fatalf("fence %+v, want in/1 at 42 epoch 3", p)
	}
	f.ended(true)

	// A real commit of in/0 at 7 and in/1 at 50; in/1 is revoked before
	// the commit completes: it must not come back as a fence.
	r = req()
	rt := kmsg.NewTxnOffsetCommitRequestTopic()
	rt.Topic = "in"
	for p, off := range []int64{7, 50} {
		rp := kmsg.NewTxnOffsetCommitRequestTopicPartition()
		rp.Partition, rp.Offset = int32(p), off
		rt.Partitions = append(rt.Partitions, rp)
	}
	r.Topics = append(r.Topics, rt)
	_ = f.preCommit(r)
	if len(r.Topics[0].Partitions) != 2 {
		t.Fatal("a commit with offsets was modified")
	}
	f.forget([]Partition{{"in", 1}})
	f.ended(true)

	r = req()
	_ = f.preCommit(r)
	if len(r.Topics) != 1 || r.Topics[0].Partitions[0].Partition != 0 || r.Topics[0].Partitions[0].Offset != 7 {
		t.Fatalf("fence %+v, want in/0 at 7 (in/1 was revoked)", r.Topics)
	}
	f.ended(false)
}

func TestTopicMismatchError(t *testing.T) {
	err := error(&TopicMismatchError{Topic: "app-changelog", What: "partitions", Want: "8", Got: "4"})
	if got, want := err.Error(), `kafka: topic "app-changelog" has partitions 4, want 8: fix or delete the topic`; got != want {
		t.Fatalf("%q, want %q", got, want)
	}
	if !errors.Is(err, ErrTopicMismatch) {
		t.Fatal("not ErrTopicMismatch")
	}
}
