package kafka

import (
	"context"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Fresh polls (issue #13: latency at a steady input rate).
//
// franz-go keeps at most one fetch response buffered per broker, and sends
// the next fetch only once that one is drained. In the engine's loop (poll,
// then process, produce and commit for one iteration T, then poll again),
// the response buffered at a poll is the fetch sent right after the
// previous poll returned: it holds what arrived before that moment. What
// arrived during the rest of the last iteration is fetched only when this
// poll drains the buffer, and returned by the next poll, one iteration
// later. So at a steady rate a record waits one to two iterations before it
// is processed, not zero to one (measured at 5,000 records/s: the newest
// record of a batch was 16 ms old at its poll; with pollFresh 3.6 ms; see
// docs/benchmarks/history.md, "Latency at 5,000 records/s (issue #13)").
//
// pollFresh is the first step of Session.Poll. When its first poll returned
// a fetch that was already buffered (stale by up to one iteration) and
// fewer than maxRecords, it polls once more, waiting at most wait: draining
// the buffer sent the next fetch, which comes back within a round trip when
// records arrived meanwhile. When none did, the broker holds that fetch (up
// to FetchMaxWait) and pollFresh returns without it after wait; it stays in
// flight and the next poll returns it. A backlog (full polls) and an idle
// input (the first poll waited for a fetch: its records are fresh) never
// pay the wait.
//
// Exactly-once is unchanged: every record either poll returns counts as
// consumed like any polled record (Poll's contract), and the transaction
// that follows commits the offsets of both.
func (s *Session) pollFresh(ctx context.Context, maxRecords int, wait time.Duration) kgo.Fetches {
	stale := s.gts.Client().BufferedFetchRecords() > 0
	pctx, cancel := context.WithTimeout(ctx, s.cfg.FetchMaxWait)
	fetches := s.gts.PollRecords(pctx, maxRecords)
	cancel()
	n := fetches.NumRecords()
	if !stale || wait <= 0 || n == 0 || (maxRecords > 0 && n >= maxRecords) || ctx.Err() != nil {
		return fetches
	}
	rest := 0 // all buffered
	if maxRecords > 0 {
		rest = maxRecords - n
	}
	fctx, fcancel := context.WithTimeout(ctx, min(wait, s.cfg.FetchMaxWait))
	defer fcancel()
	return append(fetches, s.gts.PollRecords(fctx, rest)...)
}

// freshPollWait bounds pollFresh's second poll in Session.Poll: a fetch
// round trip on a loaded 2-core machine with the broker on it (p90 5 ms in
// the measurement above); paid in full only by a batch whose poll found a
// buffered fetch but no new record arrived since.
const freshPollWait = 5 * time.Millisecond
