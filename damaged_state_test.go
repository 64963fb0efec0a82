package kstate_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testlog"
	"github.com/kstate/kstate/internal/testprocs"
)

// TestDamagedStateRebuiltFromChangelog: the local state of every partition
// is damaged while the application is stopped (each store's MANIFEST
// truncated: a copy gone wrong, a disk that lost writes). Local state is a
// cache of the changelog, so the restart deletes the damaged stores,
// restores them from the changelog in full and says so at Warn; counting
// goes on exactly where it stopped. Before, Run failed with the open error
// and the operator had to delete the directories by hand.
func TestDamagedStateRebuiltFromChangelog(t *testing.T) {
	brokers := startEmbedded(t, 3)
	dir := t.TempDir()
	stop := testprocs.Start(t, newApp(t, config(brokers, dir, testprocs.NewCounter)))
	testprocs.Produce(t, brokers, "in", "a=x", "a=y", "b=y", "c=y")
	want(t, testprocs.WaitOutputs(t, brokers, "out", 4, 20*time.Second), "a=[1 2] b=[1] c=[1]")
	if err := stop(); err != nil {
		t.Fatalf("Run: %v", err)
	}

	manifests, err := filepath.Glob(filepath.Join(dir, "app", "*", "*", "MANIFEST-*"))
	if err != nil || len(manifests) < 3 {
		t.Fatalf("MANIFEST files of the 3 shards: %v (%v)", manifests, err)
	}
	for _, m := range manifests {
		if err := os.Truncate(m, 10); err != nil {
			t.Fatal(err)
		}
	}

	cfg := config(brokers, dir, testprocs.NewCounter)
	log, logs := testlog.Warnings(t)
	cfg.Observability.Logger = log
	app, err := kstate.New(cfg.Topology, cfg.Options)
	if err != nil {
		t.Fatal(err)
	}
	_, done := testprocs.StartWatch(t, app)
	testprocs.Produce(t, brokers, "in", "a=z", "b=z", "c=z", "c=z")
	got := testprocs.WaitOutputs(t, brokers, "out", 8, 30*time.Second)
	select {
	case err := <-done:
		t.Fatalf("Run stopped on the damaged state: %v", err)
	default:
	}
	want(t, got, "a=[1 2 3] b=[1 2] c=[1 2 3]")
	if n := strings.Count(logs.String(), "local state was damaged"); n < 3 {
		t.Errorf("%d partitions said their local state was damaged and rebuilt; want 3", n)
	}
}
