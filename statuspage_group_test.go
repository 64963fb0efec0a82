package kstate_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// groupStatus is a Status of an instance caught up on its own partitions
// while two partitions of its group have no owner, partition 3 warms up on
// i2, and two rebalances happened.
func groupStatus() kstate.Status {
	now := time.Now()
	one := 1 // partition 0 moves to pipeline 1
	return kstate.Status{
		ApplicationID: "orders", InstanceID: "i1", State: "Running", Ready: true, ReadyReason: "ok",
		MaxBatchDuration: time.Minute, LastCommitAt: now, Lag: 0,
		Partitions: []kstate.PartitionStatus{{Partition: 0, Lag: 0, BatchID: 3, Watermark: -1, HandoverTo: &one}},
		Group: &kstate.GroupStatus{
			Generation: 7, Leader: "i1", BalancedAt: now.Add(-time.Minute), Partitions: 4,
			Members: []kstate.GroupMemberStatus{
				{InstanceID: "i1", Process: "i1", URL: "http://i1.orders:8080", Local: true, Active: []int32{0}, Standby: []int32{1}, Warmup: []int32{}, Lag: map[int32]int64{1: 12}},
				{InstanceID: "i2", Process: "i2", URL: "", Active: []int32{1}, Standby: []int32{}, Warmup: []int32{3}, Lag: map[int32]int64{3: 4500}},
			},
			Unowned: []int32{2, 3},
			Moves:   []kstate.GroupMove{{Partition: 3, From: "", To: "i2", Lag: 4500}},
			Rebalances: []kstate.RebalanceStatus{
				{Generation: 7, Start: now.Add(-61 * time.Second), Duration: 1200 * time.Millisecond, Leader: true, Assigned: []int32{}, Revoked: []int32{2}},
				{Generation: 6, Start: now.Add(-10 * time.Minute), Duration: 3 * time.Second, Assigned: []int32{0, 2}, Revoked: []int32{}},
			},
		},
	}
}

// The status page shows the group: a row per partition of the group with
// its owner (unowned ones marked), standbys and warm-ups, the members and
// the last rebalances with their durations; and it does not say "Caught
// up" while partitions of the group have no owner; a partition handed
// over to another pipeline says where it moves. (Before: no group on the
// page, "Yes" in the Caught up card with two partitions unowned, and no
// sign of a handover.)
func TestStatusPageGroupChromium(t *testing.T) {
	execPath := chromium(t)
	app := newApp(t, config([]string{"127.0.0.1:1"}, t.TempDir(), testprocs.NewCounter))
	page := app.Handler()
	st := groupStatus()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			page.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	}))
	t.Cleanup(srv.Close)

	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath), chromedp.WindowSize(1200, 1200))...)
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()
	var cons console
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", execPath, err)
	}
	cons.watch(ctx)
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatal(err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("state").textContent === "Running"`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(20*time.Second))); err != nil {
		t.Fatalf("page: %v", err)
	}
	for id, want := range map[string]string{
		"caught-up":        "No: 2 partitions unowned",
		"caught-up-detail": "partitions 2, 3 of the group have no owner: nothing processes them; this instance: lag 0 on 1 partition",
		"group-summary":    "(generation 7 · 2 members · 4 partitions · leader i1)",
		"group-unowned":    "Unowned: partitions 2, 3 have no owner; nothing processes them until a member takes them over.",
	} {
		if got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id))); err != nil || got != want {
			t.Errorf("#%s: %q (%v), want %q", id, got, err, want)
		}
	}
	if got, err := chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#partition-0 .phase.handover")?.textContent ?? ""`)); err != nil || got != "moving to pipeline 1" {
		t.Errorf("partition 0 handed over to pipeline 1: %q (%v)", got, err)
	}
	type groupRow struct {
		Partition, Owner, Standbys, Warmup string
		Unowned                            bool
	}
	rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]groupRow](`[...document.querySelectorAll("#group-partition-rows tr")].map(tr => ({
		Partition: tr.dataset.partition, Owner: tr.cells[1].textContent, Standbys: tr.cells[2].textContent,
		Warmup: tr.cells[3].textContent, Unowned: tr.classList.contains("unowned")}))`))
	want := []groupRow{
		{"0", "i1 (this instance)", "—", "—", false},
		{"1", "i2", "i1 (this instance) (lag 12)", "—", false},
		{"2", "unowned", "—", "—", true},
		{"3", "unowned", "—", "i2 (lag 4,500): moves when caught up", true},
	}
	if err != nil || !slices.Equal(rows, want) {
		t.Errorf("group partitions:\n got %+v (%v)\nwant %+v", rows, err, want)
	}
	members, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#group-member-rows tr")].map(tr => [...tr.cells].map(c => c.textContent).join(" | "))`))
	wantMembers := []string{
		"i1 (this instance) | i1 | http://i1.orders:8080 | 0 | 1 | —",
		"i2 | i2 | none | 1 | — | 3",
	}
	if err != nil || !slices.Equal(members, wantMembers) {
		t.Errorf("group members:\n got %q (%v)\nwant %q", members, err, wantMembers)
	}
	rbs, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#group-rebalance-rows tr")].map(tr => [...tr.cells].slice(0, 1).concat([...tr.cells].slice(2)).map(c => c.textContent).join(" | "))`))
	wantRbs := []string{"7 | 1.2 s | — | 2 | yes", "6 | 3.0 s | 0, 2 | — | no"}
	if err != nil || !slices.Equal(rbs, wantRbs) {
		t.Errorf("rebalances:\n got %q (%v)\nwant %q", rbs, err, wantRbs)
	}
	if png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100)); err == nil {
		dir, _ := os.MkdirTemp("", "kstate-statuspage-group-")
		_ = os.WriteFile(filepath.Join(dir, "group.png"), png, 0o644)
		t.Logf("screenshot: %s", filepath.Join(dir, "group.png"))
	}
	cons.check(t, 0, nil)
}
