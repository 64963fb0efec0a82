package main

import (
	"context"
	"encoding/json"
	"maps"
	"os"
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kafka/kafkatest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
	"github.com/kstate/kstate/statereader"
)

func TestMain(m *testing.M) { os.Exit(kafkatest.Main(m)) }

// model is the tracker's state after events: user → session → pages.
func model(events []stepRow) map[string]map[string][]string {
	m := map[string]map[string][]string{}
	for _, r := range events {
		u, e := r.user, r.event
		if m[u] == nil {
			m[u] = map[string][]string{}
		}
		pages, open := m[u][e.Session]
		switch e.Action {
		case "start":
			m[u][e.Session] = []string{}
		case "view":
			if !open {
				pages = []string{}
			}
			m[u][e.Session] = append(pages, e.Page)
		case "end":
			delete(m[u], e.Session)
		}
		if len(m[u]) == 0 {
			delete(m, u)
		}
	}
	return m
}

type stepRow struct {
	user  string
	event Event
}

// TestStateReaderSessions runs the session tracker on a real broker and
// reads its MapState with the state reader, from the changelog and from the
// state directory, while it runs and after it stopped: the entries equal
// the model of the events processed.
func TestStateReaderSessions(t *testing.T) {
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	events := cluster.CreateTopic(t, "st-events", 3)
	summaries := cluster.CreateTopic(t, "st-sessions", 3)
	appID := kafkatest.Name(t, "st-app")
	dir := t.TempDir()
	app, err := kstate.New(kstate.Topology[string, Event, Summary]{
		Inputs:       kstate.Topics(serde.JSON[Event](), events),
		KeySerde:     serde.String(),
		NewProcessor: func() processor.StatefulProcessor[string, Event, Summary] { return &Tracker{} },
		Output: kstate.Output[string, Summary]{
			Topic: summaries,
			Serde: serde.JSON[Summary](),
		},
	}, kstate.Options{
		ApplicationID: appID,
		Kafka: kstate.KafkaOptions{
			Brokers: cluster.Brokers(),
		},
		State: kstate.StateOptions{
			Dir: dir,
		},
		Batching: kstate.BatchingOptions{
			MaxWait: 50 * time.Millisecond,
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- app.Run(ctx) }()
	defer func() {
		cancel()
		<-done
	}()

	var rows []stepRow
	for _, r := range input {
		rows = append(rows, stepRow{r.Key, r.Value})
	}
	feed := func(rs []stepRow) {
		var recs []kafkatest.Record
		for _, r := range rs {
			v, _ := json.Marshal(r.event)
			recs = append(recs, kafkatest.Record{Key: []byte(r.user), Value: v})
		}
		cluster.Produce(t, events, recs...)
	}
	waitIn := func(n int) {
		deadline := time.Now().Add(2 * time.Minute)
		for app.Metrics().Total.RowsIn < int64(n) {
			if time.Now().After(deadline) {
				t.Fatalf("timed out waiting for %d rows processed", n)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	check := func(phase string, want map[string]map[string][]string) {
		rctx, rcancel := context.WithTimeout(context.Background(), time.Minute)
		defer rcancel()
		cl, err := statereader.OpenChangelog(rctx, cluster.Brokers(), appID)
		if err != nil {
			t.Fatalf("%s: OpenChangelog: %v", phase, err)
		}
		local, err := statereader.OpenStateDir(dir, appID)
		if err != nil {
			t.Fatalf("%s: OpenStateDir: %v", phase, err)
		}
		for src, rd := range map[string]*statereader.Reader{"changelog": cl, "statedir": local} {
			ents, err := rd.Read("sessions", statereader.Query{})
			if err != nil {
				t.Fatalf("%s/%s: Read: %v", phase, src, err)
			}
			got := map[string]map[string][]string{}
			for _, e := range ents {
				var session string
				var pages []string
				if e.Kind != "map" || json.Unmarshal(e.MapKey, &session) != nil || json.Unmarshal(e.Value, &pages) != nil {
					t.Fatalf("%s/%s: entry %+v", phase, src, e)
				}
				if got[e.Key] == nil {
					got[e.Key] = map[string][]string{}
				}
				got[e.Key][session] = pages
			}
			if !maps.EqualFunc(got, want, func(a, b map[string][]string) bool {
				return maps.EqualFunc(a, b, func(x, y []string) bool {
					xb, _ := json.Marshal(x)
					yb, _ := json.Marshal(y)
					return string(xb) == string(yb)
				})
			}) {
				t.Errorf("%s/%s: sessions\n%v\nwant\n%v", phase, src, got, want)
			}
			md := rd.Metadata()
			if len(md.Variables) != 1 || md.Variables[0].Kind != "map" || md.Variables[0].KeySchema != "string" ||
				md.Variables[0].Schema != "json:[]string" {
				t.Errorf("%s/%s: variables %+v", phase, src, md.Variables)
			}
		}
	}
	// A running application's state directory holds what its shards wrote:
	// committed batches kept in memory (write-behind) reach it when the
	// application is idle (the next poll that brings nothing). Wait for
	// that, then compare everything.
	settled := func(want map[string]map[string][]string) {
		wantJSON, _ := json.Marshal(want)
		deadline := time.Now().Add(30 * time.Second)
		for {
			got := map[string]map[string][]string{}
			local, err := statereader.OpenStateDir(dir, appID)
			if err == nil {
				var ents []statereader.Entry
				ents, err = local.Read("sessions", statereader.Query{})
				for _, e := range ents {
					var session string
					var pages []string
					if json.Unmarshal(e.MapKey, &session) != nil || json.Unmarshal(e.Value, &pages) != nil {
						continue
					}
					if got[e.Key] == nil {
						got[e.Key] = map[string][]string{}
					}
					got[e.Key][session] = pages
				}
			}
			gotJSON, _ := json.Marshal(got) // map keys sorted: equal maps, equal bytes
			if err == nil && string(gotJSON) == string(wantJSON) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("state directory of the running application after 30s: %s (last error %v), want %s", gotJSON, err, wantJSON)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	const half = 7 // before the first session ends: u1 has s1 and s2 open
	feed(rows[:half])
	waitIn(half)
	settled(model(rows[:half]))
	check("running", model(rows[:half]))
	feed(rows[half:])
	waitIn(len(rows))
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}
	done <- nil
	check("stopped", model(rows))
}
