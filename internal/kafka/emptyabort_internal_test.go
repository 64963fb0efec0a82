package kafka

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"
)

// emptyAbortWatch sees franz-go's line for a commit turned abort for its
// own transactional id only, passes warnings and errors on to the log and
// drops franz-go's other Info lines. The end-to-end check is kafkatest's
// ReadAllCommitted on kfake under load (-count=300): it missed the
// committed record of p0 before the watch (franz-go had aborted it); a
// franz-go upgrade that rewords the line makes it fail again.
func TestEmptyAbortWatch(t *testing.T) {
	var buf bytes.Buffer
	w := &emptyAbortWatch{log: slog.New(slog.NewTextHandler(&buf, nil)), txnID: "app-i1"}
	if w.Level() != kgo.LogLevelInfo {
		t.Fatalf("level %v: franz-go logs the abort at Info", w.Level())
	}
	w.Log(kgo.LogLevelInfo, "ending transaction", "transactional_id", "app-i1", "commit", true)
	w.Log(kgo.LogLevelInfo, emptyAbortMsg, "transactional_id", "app-other")
	if w.seen.Load() {
		t.Fatal("seen without the line for its own transactional id")
	}
	w.Log(kgo.LogLevelWarn, "a warning", "k", "v")
	w.Log(kgo.LogLevelError, "an error")
	if got := buf.String(); !strings.Contains(got, "franz-go: a warning") || !strings.Contains(got, "franz-go: an error") || strings.Contains(got, "ending transaction") {
		t.Fatalf("log:\n%s", got)
	}
	w.Log(kgo.LogLevelInfo, emptyAbortMsg, "transactional_id", "app-i1")
	if !w.seen.Load() {
		t.Fatal("the abort line of its own transactional id was not seen")
	}
	(&emptyAbortWatch{txnID: "x"}).Log(kgo.LogLevelWarn, "no log: dropped") // no panic
}
