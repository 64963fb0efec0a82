package kafka

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// isFenced reports whether err means a newer instance took over. After
// KIP-890 the broker answers a zombie's produce with INVALID_PRODUCER_EPOCH
// and its transaction requests with PRODUCER_FENCED; a zombie's commit comes
// back OPERATION_NOT_ATTEMPTED, which GroupTransactSession retries as an
// abort, whose answer is again one of the two. FENCED_INSTANCE_ID is the
// group's version of the same story for static members.
//
// The transaction coordinator can also answer a zombie's transactional
// requests with INVALID_TXN_STATE (its transaction was aborted when the new
// instance initialized the same transactional id: the zombie's EndTxn
// finds no ongoing transaction of its epoch) or INVALID_PRODUCER_ID_MAPPING
// (the transactional id now maps to another producer id). The session
// never misuses the transaction API itself (Begin/End are guarded), so on
// its transactional requests both mean the same thing: someone else owns
// the transactional id now.
func isFenced(err error) bool {
	return errors.Is(err, kerr.ProducerFenced) ||
		errors.Is(err, kerr.InvalidProducerEpoch) ||
		errors.Is(err, kerr.FencedInstanceID) ||
		errors.Is(err, kerr.InvalidTxnState) ||
		errors.Is(err, kerr.InvalidProducerIDMapping)
}

// IsUnreachable reports whether err means the cluster could not be reached
// or is not ready yet (connection refused or reset, DNS, broken pipe, EOF,
// I/O timeouts, brokers still starting: retriable Kafka errors), as opposed
// to an answer that will not change by retrying (missing topic,
// authorization, bad config). A closed client (kgo.ErrClientClosed,
// ErrClosed) and fencing are never unreachable: they are this side's end.
func IsUnreachable(err error) bool {
	var netErr net.Error
	var opErr *net.OpError
	var dnsErr *net.DNSError
	switch {
	case err == nil, errors.Is(err, context.Canceled):
		return false
	case errors.Is(err, ErrTxnLostInOutage):
		return true
	case errors.Is(err, kgo.ErrClientClosed), errors.Is(err, ErrClosed), errors.Is(err, ErrFenced), isFenced(err):
		return false
	case isAuthErr(err):
		return false
	case errors.As(err, &opErr), errors.As(err, &dnsErr), errors.As(err, &netErr),
		errors.Is(err, syscall.ECONNREFUSED), errors.Is(err, syscall.ECONNRESET), errors.Is(err, syscall.EPIPE),
		errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		errors.Is(err, context.DeadlineExceeded):
		return true
	}
	return kerr.IsRetriable(err)
}

// connHook notes failed connections (Session.connFailed): a connection
// that could not be opened, and an established one that broke (a read or
// write failed: the broker was killed, a reset, a timeout), but not one
// this side closed (the session closing, a request's context canceled).
type connHook struct{ s *Session }

var (
	_ kgo.HookBrokerConnect = connHook{}
	_ kgo.HookBrokerE2E     = connHook{}
)

func (h connHook) OnBrokerConnect(_ kgo.BrokerMetadata, _ time.Duration, _ net.Conn, err error) {
	if err != nil {
		h.s.connFailed.Store(time.Now().UnixNano())
	}
}

func (h connHook) OnBrokerE2E(_ kgo.BrokerMetadata, _ int16, e2e kgo.BrokerE2E) {
	if err := e2e.Err(); err != nil && !h.s.closed.Load() && !closedHere(err) {
		h.s.connFailed.Store(time.Now().UnixNano())
	}
}

// closedHere reports whether a connection error is this side's doing: a
// context canceled, the client or the connection closed by this process.
func closedHere(err error) bool {
	return errors.Is(err, context.Canceled) || errors.Is(err, net.ErrClosed) ||
		errors.Is(err, kgo.ErrClientClosed) || errors.Is(err, ErrClosed)
}

// IsRetriable reports whether err, of a transaction's produce or end, is a
// Kafka error a later attempt can pass, once franz-go's own retries of it
// have run out: a replica or leader not available (NOT_ENOUGH_REPLICAS,
// NOT_ENOUGH_REPLICAS_AFTER_APPEND, NOT_LEADER_OR_FOLLOWER,
// KAFKA_STORAGE_ERROR), a transaction coordinator moving, loading or
// busy (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
// COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS), a request that
// timed out (REQUEST_TIMED_OUT), TRANSACTION_ABORTABLE, and a produce
// refused with OUT_OF_ORDER_SEQUENCE_NUMBER (KIP-890 makes it retriable
// for a transaction: the broker appended nothing of the batch, franz-go
// fails the producer id, and the abort bumps the epoch, from which the
// sequences start again; Kafka Streams closes the task and redoes it from
// what was committed; seen on kfake when a transaction's first produce
// raced the previous one's epoch bump). The
// transaction's outcome may be unknown (an EndTxn that timed out may have
// committed), so the caller gives the batch up and redoes it from what
// Kafka committed. Not retriable: fencing, authorization, and
// UNKNOWN_TOPIC_OR_PARTITION, which franz-go retries on fresh metadata for
// a topic just created and which, when it still comes back, means the
// topic is gone.
func IsRetriable(err error) bool {
	var ke *kerr.Error
	switch {
	case err == nil, isFenced(err), isAuthErr(err), errors.Is(err, ErrFenced),
		errors.Is(err, kerr.UnknownTopicOrPartition), errors.Is(err, kerr.UnknownTopicID):
		return false
	case errors.Is(err, kerr.ConcurrentTransactions), errors.Is(err, kerr.TransactionAbortable),
		errors.Is(err, kerr.OutOfOrderSequenceNumber):
		return true
	}
	return errors.As(err, &ke) && ke.Retriable
}

// IsConnectionError reports whether err is a connection-level failure
// (IsUnreachable without the retriable Kafka error codes, which franz-go
// retries by itself and which, when they come back, persist: a deleted
// topic's UNKNOWN_TOPIC_OR_PARTITION). The coordinator rejoins with a new
// session after a session call failed with one.
func IsConnectionError(err error) bool {
	var ke *kerr.Error
	return IsUnreachable(err) && !errors.As(err, &ke)
}

// wrapTxnErr is the package function with the session's transactional
// id, and an authorization failure classified as an *AuthError naming the
// refused permission (Write on topic, when topic is set).
func (s *Session) wrapTxnErr(what, topic string, err error) error {
	if isFenced(err) {
		var failed time.Time
		if at := s.connFailed.Load(); at > 0 {
			failed = time.Unix(0, at)
		}
		outage, why := s.watch.verdict(time.Now(), s.cfg.TransactionTimeout, failed)
		if outage {
			// The broker aborted the transaction for its timeout while
			// this process ran and waited on Kafka, and bumped the
			// producer's epoch, which reads as fencing. Not a zombie: the
			// coordinator rejoins (the kerr error is kept out of the
			// chain, so that this does not match ErrFenced). Safe either
			// way: txnwatch.go.
			return fmt.Errorf("kafka: %s (transactional id %q): %w: %s: %v", what, s.cfg.TransactionalID, ErrTxnLostInOutage, why, err)
		}
		if why != "" {
			// The engine's fenced error does not repeat the chain: say
			// what was seen here.
			if s.log != nil {
				s.log.Warn("transaction fenced after this process was frozen", "transactional_id", s.cfg.TransactionalID, "during", what, "why", why)
			}
			what += " (" + why + ")"
		}
	}
	err = access{topicOp: "Write", topic: topic, groupOp: "Read", group: s.cfg.GroupID, txnID: s.cfg.TransactionalID}.classify(err)
	return wrapTxnErr(what, s.cfg.TransactionalID, err)
}

// wrapTxnErr names the operation and the transactional id and maps fencing
// to ErrFenced (keeping the broker's error in the chain).
func wrapTxnErr(what, txnID string, err error) error {
	if isFenced(err) {
		return fmt.Errorf("%w: %s (transactional id %q): %w", ErrFenced, what, txnID, err)
	}
	if errors.Is(err, kgo.ErrClientClosed) {
		return fmt.Errorf("%w: %s: %w", ErrClosed, what, err)
	}
	return fmt.Errorf("kafka: %s (transactional id %q): %w", what, txnID, err)
}

// classifyPollError returns nil for errors franz-go handles by itself
// (logging them) and a wrapped error for those that must stop the caller.
//
// Group management errors arrive as fetch errors on topic "" partition 0,
// wrapped in *kgo.ErrGroupSession (ILLEGAL_GENERATION, UNKNOWN_MEMBER_ID,
// REBALANCE_IN_PROGRESS, coordinator moves...). The group loop rejoins by
// itself; treating them as fatal breaks on the first rebalance.
func (s *Session) classifyPollError(fe kgo.FetchError) error {
	err := fe.Err
	var gerr *kgo.ErrGroupSession
	var dataLoss *kgo.ErrDataLoss
	switch {
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, context.Canceled):
		return nil // FetchMaxWait elapsed; the caller's ctx is checked by Poll
	case errors.Is(err, kgo.ErrClientClosed):
		return ErrClosed
	case errors.Is(err, kerr.FencedInstanceID):
		return fmt.Errorf("%w: group %q instance id %q is used by another member: %w", ErrFenced, s.cfg.GroupID, s.cfg.InstanceID, err)
	case isAuthErr(err):
		err = access{topicOp: "Read", topic: fe.Topic, groupOp: "Read", group: s.cfg.GroupID, txnID: s.cfg.TransactionalID}.classify(err)
		return fmt.Errorf("kafka: group %q topic %q partition %d: %w", s.cfg.GroupID, fe.Topic, fe.Partition, err)
	case errors.Is(err, kerr.InvalidSessionTimeout):
		return fmt.Errorf("kafka: group %q: SessionTimeout %v is outside the broker's group.{min,max}.session.timeout.ms: %w", s.cfg.GroupID, s.cfg.SessionTimeout, err)
	case errors.Is(err, kerr.InconsistentGroupProtocol), errors.Is(err, kerr.InvalidGroupID), errors.Is(err, kerr.GroupMaxSizeReached):
		return fmt.Errorf("kafka: group %q cannot be joined: %w", s.cfg.GroupID, err)
	case errors.As(err, &gerr):
		s.log.Warn("group error: rejoining", "group", s.cfg.GroupID, "err", err)
		return nil
	case errors.As(err, &dataLoss):
		// The broker lost records we had not consumed yet (unclean leader
		// election, recreated topic). Nothing can bring them back;
		// franz-go resumes where it can. Say it loudly.
		s.log.Error("DATA LOSS on an input partition", "topic", fe.Topic, "partition", fe.Partition, "err", err)
		return nil
	case kerr.IsRetriable(err), IsUnreachable(err):
		// A broker that went away (connection refused while it
		// restarts): franz-go reconnects by itself.
		s.log.Warn("fetch error: retrying", "topic", fe.Topic, "partition", fe.Partition, "err", err)
		return nil
	}
	return fmt.Errorf("kafka: poll group %q topic %q partition %d: %w", s.cfg.GroupID, fe.Topic, fe.Partition, err)
}

// IsAuthError reports whether err is a Kafka authorization or
// authentication failure.
func IsAuthError(err error) bool { return isAuthErr(err) }

func isAuthErr(err error) bool {
	var ae *AuthError
	return errors.As(err, &ae) || isTLSError(err) ||
		errors.Is(err, kerr.UnsupportedSaslMechanism) || errors.Is(err, kerr.IllegalSaslState) ||
		errors.Is(err, kerr.TopicAuthorizationFailed) ||
		errors.Is(err, kerr.GroupAuthorizationFailed) ||
		errors.Is(err, kerr.TransactionalIDAuthorizationFailed) ||
		errors.Is(err, kerr.ClusterAuthorizationFailed) ||
		errors.Is(err, kerr.SaslAuthenticationFailed)
}

func sortPartitions(ps []Partition) {
	slices.SortFunc(ps, func(a, b Partition) int {
		if a.Topic != b.Topic {
			if a.Topic < b.Topic {
				return -1
			}
			return 1
		}
		return int(a.Partition - b.Partition)
	})
}
