package kafka

import (
	"log/slog"
	"sync/atomic"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A commit franz-go reports but did not make.
//
// franz-go v1.22.3's EndTransaction(TryCommit) sends an abort instead of
// the commit when it finds no partition of the transaction marked added
// client-side and no offsets added, but records were produced (its
// KIP-890 path: "no produce succeeded in this transaction but produces
// were attempted"), and returns no error; GroupTransactSession.End then
// reports committed. A produce acknowledged by the broker can still find
// its partition unmarked: seen on kfake under load for a transaction's
// first produce to a topic new to the client, whose record the broker
// had appended (kafkatest's ReadAllCommitted then missed it). The records
// are aborted, and a caller that trusts the report loses them — for the
// engine, a batch without consumed offsets (first batch, timers only)
// whose changelog records it would then apply locally.
//
// franz-go says so only in that Info line, so the transactional clients'
// logger (emptyAbortWatch) takes franz-go's Info level, watches for the
// line of its own transactional id and drops every other Info line (Warn
// and above go on as kgoLogger's). Session.End then reports such a
// transaction as aborted (committed=false, no error: redo it; no offsets
// were in it, so there is nothing to rewind), and WriteTransaction and
// WriteTransactionSeq fail with ErrCommitNotMade.
//
// The client's produce state for such a partition can be off too: twice
// in CI (kfake under make test's load, the transaction's first produce to
// a topic new to the client, split over two produce requests) the redo on
// the same client was refused with OUT_OF_ORDER_SEQUENCE_NUMBER, its
// first batch numbered where the aborted one ended although the abort had
// bumped the producer epoch (franz-go resets the sequences of the
// partitions it knows at an epoch bump). So Session.End purges the
// transaction's topics from the producer (PurgeTopicsFromProducing) when
// it reports such an abort: the redo's first produce to each loads the
// topic anew and numbers from 0, which the bumped epoch accepts. (Before,
// the produce error stopped the run, which a restart cleared; nothing was
// lost either way.)

// emptyAbortMsg is franz-go's Info line for a commit turned abort.
const emptyAbortMsg = "no produce succeeded in this transaction but produces were attempted; issuing an abort to clear any server-side partition registrations"

// resetMsg is GroupTransactSession.End's Info line when it ends with an
// abort or an error; its tried_commit is false when the last EndTxn it sent
// (or tried to send) was an abort: a rebalance or a failed offset commit
// turned the caller's commit into one, or the caller asked for it.
const resetMsg = "transact session resetting to current committed state (potentially after a rejoin)"

// emptyAbortWatch is a transactional client's franz-go logger: kgoLogger
// (when log is set), plus the watch for emptyAbortMsg and resetMsg. Reset
// seen and abortSent before ending a transaction, read them after (End
// logs both on the caller's goroutine, before it returns).
type emptyAbortWatch struct {
	log   *slog.Logger // nil: franz-go's warnings are dropped
	txnID string
	seen  atomic.Bool
	// abortSent: the ending transaction's last EndTxn was an abort
	// (resetMsg with tried_commit false; unconfirmed.go).
	abortSent atomic.Bool
}

func (w *emptyAbortWatch) Level() kgo.LogLevel { return kgo.LogLevelInfo }

func (w *emptyAbortWatch) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level <= kgo.LogLevelWarn {
		if w.log != nil {
			kgoLogger{w.log}.Log(level, msg, keyvals...)
		}
		return
	}
	if msg == resetMsg {
		for i := 0; i+1 < len(keyvals); i += 2 {
			if k, _ := keyvals[i].(string); k == "tried_commit" {
				if tried, ok := keyvals[i+1].(bool); ok && !tried {
					w.abortSent.Store(true)
				}
			}
		}
		return
	}
	if msg != emptyAbortMsg {
		return
	}
	for i := 0; i+1 < len(keyvals); i += 2 {
		if k, _ := keyvals[i].(string); k == "transactional_id" {
			if id, _ := keyvals[i+1].(string); id == w.txnID {
				w.seen.Store(true)
			}
		}
	}
}
