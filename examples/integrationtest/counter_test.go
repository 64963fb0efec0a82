package integrationtest

import (
	"context"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// TestMain stops the Kafka broker that the tests share once they are done.
func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

// The counter counts exactly once, and a restarted instance whose local
// state is gone restores the counts from the changelog and goes on.
func TestCounter(t *testing.T) {
	k := kafkatest.Start(t) // logs which Kafka it is: Docker, the jar broker, ...
	settings := Settings{
		Brokers:       k.Brokers(),
		ApplicationID: kafkatest.Name(t, "wordcount"),
		InputTopic:    k.CreateTopic(t, "words", 2),
		OutputTopic:   k.CreateTopic(t, "counts", 2),
		StateDir:      t.TempDir(),
	}

	stop := run(t, settings)
	k.Produce(t, settings.InputTopic, words("to be or not to be")...)
	got := k.ReadCommitted(t, settings.OutputTopic, 6, time.Minute)
	want := map[string]string{"to": "1 2", "be": "1 2", "or": "1", "not": "1"}
	checkCounts(t, got, want)
	stop()

	// A new instance without local state (a new machine) restores the
	// counts from the changelog topic before it counts on.
	if err := os.RemoveAll(settings.StateDir); err != nil {
		t.Fatal(err)
	}
	run(t, settings)
	k.Produce(t, settings.InputTopic, words("to be")...)
	got = k.ReadCommitted(t, settings.OutputTopic, 8, time.Minute)
	want["to"], want["be"] = "1 2 3", "1 2 3"
	checkCounts(t, got, want)
}

// run starts the application the way main does, in a goroutine; the
// returned stop (also called at the end of the test) shuts it down
// gracefully and fails the test if Run failed.
func run(t *testing.T, s Settings) (stop func()) {
	t.Helper()
	top, opts := Config(s)
	opts.Batching.MaxWait = 50 * time.Millisecond // react quickly: tests produce little
	opts.Observability.Logger = slog.New(slog.NewTextHandler(t.Output(), nil))
	app, err := kstate.New(top, opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	stop = sync.OnceFunc(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	t.Cleanup(stop)
	return stop
}

// words makes one input record per word, keyed by the word.
func words(text string) []kafkatest.Record {
	var recs []kafkatest.Record
	for _, w := range strings.Fields(text) {
		recs = append(recs, kafkatest.Record{Key: []byte(w), Value: []byte(w)})
	}
	return recs
}

// checkCounts compares the outputs, per word in order, with want: exactly
// once means no count is missing or repeated.
func checkCounts(t *testing.T, got []kafkatest.Record, want map[string]string) {
	t.Helper()
	seq := map[string][]string{}
	for _, r := range got {
		seq[string(r.Key)] = append(seq[string(r.Key)], string(r.Value))
	}
	for w, counts := range want {
		if g := strings.Join(seq[w], " "); g != counts {
			t.Errorf("counts of %q: %q, want %q", w, g, counts)
		}
	}
	if len(seq) != len(want) {
		t.Errorf("outputs for %d words, want %d: %v", len(seq), len(want), seq)
	}
}
