package kstate

import (
	"context"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// lagRefresh is how often Run reads the end offsets of the input
// partitions for the consumer lag (kstate_consumer_lag, Status.Lag): the
// lag is at most this stale, also while a long batch runs (docs/OPERATIONS.md,
// "Metrics"). One ListOffsets request per input topic and interval, for
// all pipelines. A variable for tests.
var lagRefresh = 5 * time.Second

// refreshLag starts the goroutine that reads the input topics' last stable
// offsets (the end of what the read_committed sessions can read) every
// lagRefresh and hands them to every pipeline's coordinator, independently
// of the batch loops. It returns the function that stops it and waits for
// it (before Run returns). Errors leave the last offsets in place: the
// fetches' high watermarks still move the lag between batches; a failure
// is logged once per streak.
func (a *App[K, I, O]) refreshLag(ctx context.Context, adm engine.Admin, set *pipelineSet) (stop func()) {
	so, ok := adm.(engine.StableOffsetter)
	if !ok {
		return func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	topics := a.cfg.engineTopics()
	log := a.cfg.Logger.With("app", a.cfg.ApplicationID)
	go func() {
		defer close(done)
		t := time.NewTicker(lagRefresh)
		defer t.Stop()
		failing := map[string]bool{}
		for {
			for _, topic := range topics {
				rctx, rcancel := context.WithTimeout(ctx, max(lagRefresh, 5*time.Second))
				ends, err := so.StableOffsets(rctx, topic)
				rcancel()
				if ctx.Err() != nil {
					return
				}
				if err != nil {
					if !failing[topic] {
						log.Debug("reading the input's end offsets for the consumer lag failed: the lag may be stale until it succeeds",
							"topic", topic, "err", err)
					}
					failing[topic] = true
					continue
				}
				failing[topic] = false
				for _, c := range set.Coords {
					c.NoteEndOffsets(topic, ends)
				}
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}
