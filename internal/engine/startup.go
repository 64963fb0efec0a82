package engine

import (
	"context"
	"errors"
	"time"
)

// TopicDropper is implemented by an Admin that can delete a topic it
// created: a first start that fails after creating the changelog topic
// (an output topic's max.message.bytes under MaxRecordBytes, the
// dead-letter topic not creatable, ...) deletes it again, so that a failed
// start leaves the cluster as it found it. Optional.
type TopicDropper interface {
	// DropEmptyTopic deletes topic if no record was ever written to it
	// (every partition's end offset 0) and reports whether it did: a topic
	// that holds records belongs to someone (another instance started on
	// it meanwhile) and is kept.
	DropEmptyTopic(ctx context.Context, topic string) (bool, error)
}

// DropCreatedChangelog deletes the changelog topic if this coordinator's
// Run created it (it was missing) and then failed with cause before it
// finished starting (setup: the topic checks, the dead-letter topic, the
// session), and reports whether it had. A Run that started and failed
// later keeps the topic. The caller calls it once Run has
// returned (every pipeline's Run: a sibling may still be starting on the
// topic otherwise); the topic is deleted only if still empty, so that a
// changelog another instance started on meanwhile is kept. Cancellation
// of ctx (Run stopped during start-up) keeps it: the next start uses it.
func (c *Coordinator) DropCreatedChangelog(ctx context.Context, cause error) bool {
	d, ok := c.cfg.Admin.(TopicDropper)
	if !c.createdChangelog.Load() || !ok || cause == nil || ctx.Err() != nil || errors.Is(cause, context.Canceled) {
		return false
	}
	dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	dropped, err := d.DropEmptyTopic(dctx, c.cfg.ChangelogTopic)
	switch {
	case err != nil:
		c.log.Warn("start-up failed after creating the changelog topic, and deleting it failed: delete it by hand (kstate reset) if the application is not started again",
			"changelog", c.cfg.ChangelogTopic, "err", err, "cause", cause)
	case dropped:
		c.log.Info("start-up failed: deleted the changelog topic this start created", "changelog", c.cfg.ChangelogTopic, "cause", cause)
	default:
		c.log.Info("start-up failed: kept the changelog topic this start created, records were written to it meanwhile", "changelog", c.cfg.ChangelogTopic)
	}
	return true
}
