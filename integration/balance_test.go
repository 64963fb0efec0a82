package integration

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// Balance by process on the real broker (issue #27): two instances of two
// pipelines each over 6 partitions own 3 each — the second instance takes
// half when it joins, not 2 of 6 (per-member balancing split 2/2/1/1 with
// both extra places on the first instance) — and the counts stay exact.
//
// It also shows the group view of an unowned partition on real instances:
// a cooperative move takes a partition from its owner in one generation
// and gives it to its new owner in the next, after the owner revoked it
// and every member rejoined (a member hears of the follow-up rebalance at
// its next heartbeat: up to a second or more here). Meanwhile the
// partition has no owner in the group: both instances' /status list it in
// group.unowned (the status page then says "No: N partitions unowned", not
// "Caught up": TestStatusPageGroupChromium), with the members' active
// partitions and the unowned ones covering the 6 partitions once; then the
// rebalances that revoked and assigned it are in each instance's list.

// statusGroup is what the test reads of /status.
type statusGroup struct {
	State string `json:"state"`
	Group *struct {
		Generation int32   `json:"generation"`
		Partitions int32   `json:"partitions"`
		Unowned    []int32 `json:"unowned"`
		Members    []struct {
			InstanceID string  `json:"instance_id"`
			Process    string  `json:"process"`
			Active     []int32 `json:"active"`
			Warmup     []int32 `json:"warmup"`
		} `json:"members"`
		Moves []struct {
			Partition int32  `json:"partition"`
			From      string `json:"from"`
			To        string `json:"to"`
		} `json:"moves"`
		Rebalances []struct {
			Generation int32   `json:"generation"`
			Assigned   []int32 `json:"assigned"`
			Revoked    []int32 `json:"revoked"`
		} `json:"rebalances"`
	} `json:"group"`
}

// getStatus serves GET /status from h.
func getStatus(t *testing.T, h http.Handler) (statusGroup, []byte) {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var st statusGroup
	if rec.Code != 200 || json.Unmarshal(rec.Body.Bytes(), &st) != nil {
		t.Errorf("GET /status: %d %s", rec.Code, rec.Body)
	}
	return st, rec.Body.Bytes()
}

// perProcessActive counts the group's active partitions per process.
func perProcessActive(st statusGroup) map[string]int {
	m := map[string]int{}
	if st.Group != nil {
		for _, mb := range st.Group.Members {
			m[mb.Process] += len(mb.Active)
		}
	}
	return m
}

// unownedSeen is the first /status an instance served listing unowned
// partitions.
type unownedSeen struct {
	instance string
	st       statusGroup
	body     []byte
	// first and last are when a /status of either instance listed
	// unowned partitions first and last.
	first, last time.Time
}

func TestBalanceByProcessRealBroker(t *testing.T) {
	t.Parallel()
	testBalanceByProcess(t, false)
}

// TestBalanceByProcessWarmupsRealBroker: the same join, the newcomer's
// copies behind by more than AcceptableLag: it warms up (2 at a time), and
// the probing rebalances move its half over once caught up; a probing
// move leaves its partitions unowned for a moment too.
//
// make test-long: 9-13 s here, more under make test's load; the fast
// variant above and the balancer's TestDecideProcessJoinWarmups stay in
// make test.
func TestBalanceByProcessWarmupsRealBroker(t *testing.T) {
	longTest(t)
	t.Parallel()
	testBalanceByProcess(t, true)
}

func testBalanceByProcess(t *testing.T, warmups bool) {
	const parts = 6
	keys, initial, trickle := 30, 120, 6
	if warmups {
		// At least 50 keys per partition: ≥ 50 changelog records each, so
		// a copy from scratch is not within AcceptableLag; no input while
		// the group settles, so the copies' positions stay comparable with
		// the end offsets the leader reads.
		keys, initial, trickle = 300, 600, 0
	}
	e := newSpecEnv(t, parts)
	cfg1 := e.config(t, testprocs.NewCounter)
	cfg1.Kafka.SessionTimeout = 6 * time.Second // the broker's minimum
	cfg1.Batching.Pipelines = 2
	if warmups {
		cfg1.Group.AcceptableLag = 20
		cfg1.Group.ProbingInterval = time.Second
	}
	cfg2 := cfg1
	cfg2.InstanceID, cfg2.State.Dir = "i2", t.TempDir()
	app1 := newSpecApp(t, cfg1)
	stop1 := testprocs.Start(t, app1)
	in := &testprocs.KeyCycler{T: t, Brokers: e.brokers, Topic: e.in, Keys: keys}
	in.Produce(initial) // without warmups: 4 records a key, a changelog far within AcceptableLag, so every copy counts as caught up
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	h1 := app1.Handler()
	// i1's two pipelines join one after the other: the second's share may
	// still be moving (cooperatively, so unowned for a moment) when the
	// outputs are in. Wait for the group to settle.
	for deadline := time.Now().Add(waitOut); ; time.Sleep(20 * time.Millisecond) {
		st, _ := getStatus(t, h1)
		if st.Group != nil && perProcessActive(st)["i1"] == parts && len(st.Group.Unowned) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("i1 alone: %+v, want all %d partitions", st.Group, parts)
		}
	}

	app2 := newSpecApp(t, cfg2)
	h2 := app2.Handler()
	// Watch both instances' /status from the join on.
	var (
		mu   sync.Mutex
		seen *unownedSeen
		warm int // the most moves (warm-ups) a view listed
	)
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, w := range []struct {
		id string
		h  http.Handler
	}{{"i1", h1}, {"i2", h2}} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-time.After(5 * time.Millisecond):
				}
				st, body := getStatus(t, w.h)
				if st.Group == nil {
					continue
				}
				mu.Lock()
				warm = max(warm, len(st.Group.Moves))
				if len(st.Group.Unowned) > 0 {
					if seen == nil {
						seen = &unownedSeen{instance: w.id, st: st, body: body, first: time.Now()}
					}
					seen.last = time.Now()
				}
				mu.Unlock()
			}
		}()
	}
	stopWatch := sync.OnceFunc(func() { close(done); wg.Wait() })
	t.Cleanup(stopWatch)
	stop2 := testprocs.Start(t, app2)
	var st1, st2 statusGroup
	defer func() {
		if t.Failed() && st1.Group != nil && st2.Group != nil {
			t.Logf("last seen: i1 generation %d per process %v, i2 generation %d per process %v",
				st1.Group.Generation, perProcessActive(st1), st2.Group.Generation, perProcessActive(st2))
		}
	}()
	testprocs.Eventually(t, waitOut, "each instance owns 3 partitions, 1 or 2 per pipeline, in both views", func() bool {
		if trickle > 0 {
			in.Produce(trickle)
		}
		time.Sleep(100 * time.Millisecond)
		st1, _ = getStatus(t, h1)
		st2, _ = getStatus(t, h2)
		for _, st := range []statusGroup{st1, st2} {
			if st.State != "Running" || st.Group == nil || len(st.Group.Members) != 4 || len(st.Group.Unowned) != 0 {
				return false
			}
			if pp := perProcessActive(st); pp["i1"] != 3 || pp["i2"] != 3 {
				return false
			}
		}
		for _, app := range []*kstate.App[string, string, string]{app1, app2} {
			bp := byPipeline(app.Status())
			if len(bp) != 2 || len(bp[0])+len(bp[1]) != 3 {
				return false
			}
		}
		return st1.Group.Generation == st2.Group.Generation
	})
	in.Produce(120)
	checkCounts(t, testprocs.WaitOutputs(t, e.brokers, e.out, in.Sent, waitOut), in.Sent, keys)
	stopWatch()
	t.Logf("settled at generation %d: i1 %v, i2 %v", st1.Group.Generation, byPipeline(app1.Status()), byPipeline(app2.Status()))

	r2 := app2.Metrics().Total.RestoreRecords
	t.Logf("most warm-ups in a view: %d; i2 restored %d changelog records", warm, r2)
	if warmups != (warm > 0) || warm > 2 {
		t.Fatalf("%d warm-ups in a view (moves when caught up), want %s", warm, map[bool]string{true: "1 or 2", false: "none (every copy caught up)"}[warmups])
	}
	// Warmed up, a moved partition restores at most the tail its warm-up
	// was behind (from scratch: 50 keys or more each).
	if lag := cfg1.Group.AcceptableLag; warmups && r2 > 3*lag {
		t.Fatalf("i2 restored %d changelog records for its 3 warmed-up partitions, want at most %d", r2, 3*lag)
	}

	// The unowned partitions seen during the join.
	if seen == nil {
		t.Fatal("no /status of either instance listed an unowned partition during the join")
	}
	g := seen.st.Group
	t.Logf("%s's /status at generation %d: unowned %v (members %+v); unowned partitions listed for %v",
		seen.instance, g.Generation, g.Unowned, g.Members, seen.last.Sub(seen.first).Round(time.Millisecond))
	cover := slices.Clone(g.Unowned)
	for _, m := range g.Members {
		cover = append(cover, m.Active...)
	}
	slices.Sort(cover)
	if g.Partitions != parts || !slices.Equal(cover, []int32{0, 1, 2, 3, 4, 5}) {
		t.Fatalf("%s's view at generation %d: active and unowned partitions %v, want each of the %d once", seen.instance, g.Generation, cover, parts)
	}
	// The instances' rebalances: the view's generation revoked the
	// unowned partitions, a later one assigned them.
	revoked, assigned := map[int32]bool{}, map[int32]bool{}
	for _, st := range []statusGroup{st1, st2} {
		for _, r := range st.Group.Rebalances {
			for _, p := range r.Revoked {
				revoked[p] = revoked[p] || r.Generation == g.Generation
			}
			for _, p := range r.Assigned {
				assigned[p] = assigned[p] || r.Generation > g.Generation
			}
		}
	}
	for _, p := range g.Unowned {
		if !revoked[p] || !assigned[p] {
			t.Errorf("unowned partition %d at generation %d: revoked then %v, assigned later %v; rebalances i1 %+v, i2 %+v",
				p, g.Generation, revoked[p], assigned[p], st1.Group.Rebalances, st2.Group.Rebalances)
		}
	}

	// The status page, fed that /status: not "Caught up".
	if got := pageCaughtUp(t, h1, seen.body); got != fmt.Sprintf("No: %d partitions unowned", len(g.Unowned)) {
		t.Errorf("the status page's Caught up card with %s's /status of generation %d: %q", seen.instance, g.Generation, got)
	}

	for i, stop := range []func() error{stop2, stop1} {
		if err := stop(); err != nil {
			t.Fatal(fmt.Errorf("stop i%d: %w", 2-i, err))
		}
	}
}

// pageCaughtUp loads the status page of h in a headless browser, its
// /status answered with status, and returns its "Caught up" card.
func pageCaughtUp(t *testing.T, h http.Handler, status []byte) string {
	t.Helper()
	execPath := ""
	for _, name := range []string{"chromium-headless-shell", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			execPath = p
			break
		}
	}
	if execPath == "" {
		msg := "no chromium-headless-shell or chromium on PATH: the status page is not checked (make deps installs it)"
		if os.Getenv("CI") != "" {
			t.Fatal(msg)
		}
		t.Log(msg)
		return fmt.Sprintf("No: (unchecked) %s", status)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			h.ServeHTTP(w, r)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(status)
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(execPath))...)
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()
	if err := chromedp.Do(ctx, chromedp.Navigate(srv.URL+"/")); err != nil {
		t.Fatalf("status page: %v", err)
	}
	if _, err := chromedp.Run(ctx, chromedp.Poll[bool](`document.getElementById("caught-up").textContent !== ""`,
		chromedp.WithPollingInterval(50*time.Millisecond), chromedp.WithPollingTimeout(30*time.Second))); err != nil {
		t.Fatalf("status page: %v", err)
	}
	got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("caught-up")))
	if err != nil {
		t.Fatalf("status page: %v", err)
	}
	return got
}
