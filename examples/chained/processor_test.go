package main

import (
	"testing"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/kstatetest"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/serde"
)

// The two applications chained without Kafka: Dedup's output records (key,
// value bytes and event-time timestamp) are PerMinute's input records.
func TestChain(t *testing.T) {
	dedup := kstatetest.New(t, kstate.Topology[string, Click, View]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.JSON[Click](), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, Click, View] { return &Dedup{} },
		Output: kstate.Output[string, View]{
			Serde:     serde.JSON[View](),
			Key:       func(_ string, v View) []byte { return []byte(v.Page) },
			EventTime: func(v View) int64 { return v.AtMs },
		},
	}, kstatetest.ApplicationID("dedup"))
	perMinute := kstatetest.New(t, kstate.Topology[string, View, PageMinute]{
		KeySerde:     serde.String(),
		Inputs:       kstate.Topics(serde.JSON[View](), "input"),
		NewProcessor: func() processor.StatefulProcessor[string, View, PageMinute] { return &PerMinute{} },
		TimeMode:     processor.EventTime,
		Output: kstate.Output[string, PageMinute]{
			Serde: serde.JSON[PageMinute](),
		},
	}, kstatetest.ApplicationID("per-minute")) // one partition: the watermark is per partition

	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC).UnixMilli()
	dedup.Input("ann", Click{Seq: 1, Page: "/a", AtMs: t0 + 5_000})
	dedup.Input("ann", Click{Seq: 1, Page: "/a", AtMs: t0 + 5_000}) // a retry: dropped
	dedup.Input("bob", Click{Seq: 1, Page: "/a", AtMs: t0 + 20_000})
	dedup.Input("ann", Click{Seq: 2, Page: "/b", AtMs: t0 + 61_000})
	dedup.MustRunBatch()
	dedup.Input("bob", Click{Seq: 1, Page: "/a", AtMs: t0 + 20_000}) // again, a later batch
	dedup.Input("ann", Click{Seq: 3, Page: "/a", AtMs: t0 + 125_000})
	dedup.MustRunBatch()

	views := dedup.Outputs()
	if len(views) != 4 {
		t.Fatalf("dedup emitted %d views, want 4 (2 duplicates dropped): %+v", len(views), views)
	}
	for _, v := range views {
		if string(v.Key) != v.Value.Page || v.Timestamp.UnixMilli() != v.Value.AtMs {
			t.Fatalf("view %+v: want key = page and timestamp = click time", v)
		}
		perMinute.InputRecord(v.Key, v.Bytes, v.Timestamp)
	}
	perMinute.MustRunBatch() // watermark 12:02:05 (no allowed lateness) after this batch
	perMinute.MustRunBatch() // fires the minutes that ended by then
	got := map[string]int64{}
	for _, m := range perMinute.OutputValues() {
		got[m.Page+"@"+time.UnixMilli(m.StartMs).UTC().Format("15:04")] = m.Views
	}
	want := map[string]int64{"/a@12:00": 2, "/b@12:01": 1}
	if len(got) != len(want) || got["/a@12:00"] != 2 || got["/b@12:01"] != 1 {
		t.Fatalf("per-minute counts %v, want %v", got, want)
	}
}
