package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// resetCluster returns the bootstrap addresses of the package's test
// cluster (a real broker when one is available, else the in-process one)
// and a new input topic of 2 partitions.
func resetCluster(t *testing.T) (brokers, input string) {
	t.Helper()
	c := kafkatest.Start(t)
	return strings.Join(c.Brokers(), ","), c.CreateTopic(t, "reset-dir-in", 2)
}

// mustExist fails the test when path is missing.
func mustExist(t *testing.T, path, why string) {
	t.Helper()
	if _, err := os.Stat(path); err != nil {
		t.Fatalf("%s: %v", why, err)
	}
}

// TestResetHostileAppStaysInStateDir: issue #25, "kstate reset --app ..
// --state-dir X" deleted X's parent with an unrelated file in it. The id is
// refused (Kafka's rules, and "<state-dir>/.." leaves the state
// directory) before anything is changed.
func TestResetHostileAppStaysInStateDir(t *testing.T) {
	brokers, in := resetCluster(t)
	for _, app := range []string{"..", ".", "../parent", "a/b"} {
		t.Run(app, func(t *testing.T) {
			parent := t.TempDir()
			unrelated := filepath.Join(parent, "unrelated.txt")
			if err := os.WriteFile(unrelated, []byte("keep me"), 0o644); err != nil {
				t.Fatal(err)
			}
			stateDir := filepath.Join(parent, "state")
			if err := os.Mkdir(stateDir, 0o755); err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			var out bytes.Buffer
			err := runReset(ctx, &out, resetFlags{brokers: brokers, app: app, inputTopics: []string{in}, stateDir: stateDir})
			for errors.Is(err, kerr.CoordinatorNotAvailable) && ctx.Err() == nil {
				// A new broker creates its offsets topic at the first group
				// request.
				time.Sleep(500 * time.Millisecond)
				out.Reset()
				err = runReset(ctx, &out, resetFlags{brokers: brokers, app: app, inputTopics: []string{in}, stateDir: stateDir})
			}
			var ce *codeError
			if !errors.As(err, &ce) || ce.code != exitUsage || !strings.Contains(err.Error(), "--app") {
				t.Errorf("reset --app %q: %v (output %q), want a usage error naming --app", app, err, out.String())
			}
			mustExist(t, unrelated, "the unrelated file next to the state directory")
			mustExist(t, stateDir, "the state directory")
		})
	}
}

// TestResetRemovesOnlyKstateDirs: reset removes <state-dir>/<app> when
// kstate created it (the marker Run writes, or the bare shard layout of an
// older release), and refuses any other directory before it changes
// anything (the changelog topic is still there).
func TestResetRemovesOnlyKstateDirs(t *testing.T) {
	brokers, in := resetCluster(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	adm, err := kafka.NewAdmin(strings.Split(brokers, ","))
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	shardDir := func(t *testing.T, dir string, p string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Join(dir, p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p, "LOCK.kstate"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name    string
		prepare func(t *testing.T, dir, app string)
		refused string // "" when the directory is removed
	}{
		{"marker", func(t *testing.T, dir, app string) {
			if err := shard.MarkAppDir(dir, app); err != nil {
				t.Fatal(err)
			}
			shardDir(t, dir, "0")
			if err := os.WriteFile(filepath.Join(dir, "0", "data"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, ""},
		{"older release", func(t *testing.T, dir, _ string) { shardDir(t, dir, "0"); shardDir(t, dir, "1") }, ""},
		{"foreign file", func(t *testing.T, dir, _ string) {
			shardDir(t, dir, "0")
			if err := os.WriteFile(filepath.Join(dir, "notes.txt"), []byte("mine"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, `holds "notes.txt", which is not a shard directory`},
		{"numbered dir without lock", func(t *testing.T, dir, _ string) {
			if err := os.MkdirAll(filepath.Join(dir, "3", "photos"), 0o755); err != nil {
				t.Fatal(err)
			}
		}, "has no shard lock file"},
		{"other application's marker", func(t *testing.T, dir, _ string) {
			if err := shard.MarkAppDir(dir, "other"); err != nil {
				t.Fatal(err)
			}
		}, `belongs to application "other"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := kafkatest.Name(t, "reset-dir-app")
			stateDir := t.TempDir()
			dir := filepath.Join(stateDir, app)
			if err := os.MkdirAll(dir, 0o755); err != nil {
				t.Fatal(err)
			}
			tc.prepare(t, dir, app)
			changelog := app + "-changelog"
			if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: changelog, Partitions: 2, ReplicationFactor: -1, Compacted: true}); err != nil {
				t.Fatal(err)
			}
			var out bytes.Buffer
			err := runReset(ctx, &out, resetFlags{brokers: brokers, app: app, inputTopics: []string{in}, stateDir: stateDir})
			for errors.Is(err, kerr.CoordinatorNotAvailable) && ctx.Err() == nil {
				// A new broker creates its offsets topic at the first group
				// request.
				time.Sleep(500 * time.Millisecond)
				out.Reset()
				err = runReset(ctx, &out, resetFlags{brokers: brokers, app: app, inputTopics: []string{in}, stateDir: stateDir})
			}
			if tc.refused == "" {
				if err != nil {
					t.Fatalf("reset: %v\n%s", err, out.String())
				}
				if _, err := os.Stat(dir); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("state directory after reset: %v, want it removed", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), "reset refused: will not remove "+dir) || !strings.Contains(err.Error(), tc.refused) {
				t.Fatalf("reset: %v, want a refusal naming %s and %q", err, dir, tc.refused)
			}
			mustExist(t, dir, "the refused directory")
			if _, err := adm.Partitions(ctx, changelog); err != nil {
				t.Fatalf("the changelog after a refused reset: %v, want it untouched", err)
			}
		})
	}
}
