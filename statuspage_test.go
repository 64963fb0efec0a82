package kstate_test

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/testprocs"
)

// The page is served at exactly "/", with a CSP that allows no request to
// another origin, and works under a prefix stripped by http.StripPrefix.
func TestStatusPageServed(t *testing.T) {
	app := newApp(t, config([]string{"127.0.0.1:1"}, t.TempDir(), testprocs.NewCounter))
	mux := http.NewServeMux()
	mux.Handle("/ops/", http.StripPrefix("/ops", app.Handler()))
	for _, path := range []string{"/", "/ops/"} {
		h := app.Handler()
		if path == "/ops/" {
			h = mux
		}
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		body := rec.Body.String()
		csp := rec.Header().Get("Content-Security-Policy")
		if rec.Code != 200 || rec.Header().Get("Content-Type") != "text/html; charset=utf-8" ||
			!strings.Contains(body, "<script>") || !strings.Contains(body, "<style>") || !strings.Contains(body, `fetch("status"`) ||
			!strings.Contains(csp, "default-src 'none'") || !strings.Contains(csp, "script-src 'sha256-") || !strings.Contains(csp, "connect-src 'self'") {
			t.Fatalf("GET %s: %d %v\n%.300s", path, rec.Code, rec.Header(), body)
		}
		for _, external := range []string{"http://", "https://", "//cdn", `src="/`, `href="/`} {
			if i := strings.Index(body, external); i >= 0 && !strings.HasPrefix(body[i:], "http://www.w3.org/2000/svg") {
				t.Errorf("GET %s: the page refers to %q: %.80s", path, external, body[i:])
			}
		}
	}
	// Only the root is the page; unknown paths stay 404.
	wantProbe(t, app.Handler(), "/nope", 404, "not found")
}

// chromium returns the headless Chromium to drive, or skips the test (fails
// it in CI, where `make deps` installs chromium-headless-shell).
func chromium(t *testing.T) string {
	for _, name := range []string{"chromium-headless-shell", "chromium"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "no chromium-headless-shell or chromium on PATH: the status page is not tested in a browser " +
		"(make deps installs it; or: apt-get install -y --no-install-recommends chromium-headless-shell)"
	if os.Getenv("CI") != "" {
		t.Fatal(msg)
	}
	fmt.Fprintln(os.Stderr, "SKIP TestStatusPageChromium: "+msg)
	t.Skip(msg)
	return ""
}

// console collects what the page writes to the console and fails the test
// on an error or an uncaught exception.
type console struct {
	mu   sync.Mutex
	msgs []chromedp.ConsoleMessage
}

func (c *console) watch(ctx context.Context) {
	msgs := chromedp.Console(ctx)
	go func() {
		for m, err := range msgs {
			if err != nil {
				return
			}
			c.mu.Lock()
			c.msgs = append(c.msgs, m)
			c.mu.Unlock()
		}
	}()
}

// check fails on errors and exceptions after the first skip messages; it
// returns how many messages there are.
func (c *console) check(t *testing.T, skip int, allow func(chromedp.ConsoleMessage) bool) int {
	t.Helper()
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs[min(skip, len(c.msgs)):] {
		if (m.Type == chromedp.ConsoleError || m.IsException()) && (allow == nil || !allow(m)) {
			t.Errorf("browser console: %s (%s:%d:%d, source %q)", m, m.URL, m.Line, m.Column, m.Source)
		}
	}
	return len(c.msgs)
}

// row is a row of the partitions table as the page shows it.
type row struct {
	Partition string `json:"partition"`
	Phase     string `json:"phase"`
	RowsIn    string `json:"rowsIn"`
}

const readRows = `[...document.querySelectorAll("#partition-rows tr")].map(tr => ({
	partition: tr.dataset.partition, phase: tr.querySelector(".phase").textContent,
	rowsIn: tr.cells[6].textContent}))`

// TestStatusPageChromium loads the status page in a real headless Chromium:
// a running App's partitions and state, then a restore in progress on a
// fresh StateDir (the changelog fetches of partition 0 are held by the
// in-process broker until the page has shown it), then the App ready
// again, and "disconnected" when the server goes away. It fails on any
// console error or exception and keeps full-page screenshots.
func TestStatusPageChromium(t *testing.T) {
	execPath := chromium(t)
	start := time.Now()
	shots, err := os.MkdirTemp("", "kstate-statuspage-")
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("status page screenshots: %s", shots)

	cluster, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.DefaultNumPartitions(2),
		kfake.SeedTopics(2, "in", "out"), kfake.GroupMinSessionTimeout(100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cluster.Close)
	brokers := cluster.ListenAddrs()

	// One server for both runs, the App's handler mounted under a prefix.
	var current atomic.Value // http.Handler
	srv := httptest.NewServer(http.StripPrefix("/ops/kstate", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		current.Load().(http.Handler).ServeHTTP(w, r)
	})))
	t.Cleanup(srv.Close)
	pageURL := srv.URL + "/ops/kstate/"

	// The whole browser session: ~15 s on a quiet machine; make test runs
	// other packages beside it on 2 cores (it once took 61 s there).
	ctx, cancel := context.WithTimeout(context.Background(), 240*time.Second)
	defer cancel()
	ctx, cancel = chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(execPath), chromedp.WindowSize(1200, 900))...)
	defer cancel()
	ctx, cancel = chromedp.NewContext(ctx)
	defer cancel()
	if err := chromedp.Do(ctx); err != nil {
		t.Fatalf("start %s: %v", execPath, err)
	}
	var cons console
	cons.watch(ctx)
	screenshot := func(name string) {
		t.Helper()
		png, err := chromedp.Run(ctx, chromedp.FullScreenshot(100))
		if err != nil {
			t.Fatalf("screenshot %s: %v", name, err)
		}
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	// waitPage polls the page until js is true.
	waitPage := func(what, js string) {
		t.Helper()
		if _, err := chromedp.Run(ctx, chromedp.Poll[bool](js, chromedp.WithPollingInterval(50*time.Millisecond),
			chromedp.WithPollingTimeout(20*time.Second))); err != nil {
			body, _ := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("body")))
			cons.check(t, 0, func(m chromedp.ConsoleMessage) bool { return m.Source == "network" })
			t.Fatalf("page: waiting for %s: %v\npage text:\n%s", what, err, body)
		}
	}
	// matches checks the page's state and rows against App.Status.
	matches := func(app *kstate.App[string, string, string]) {
		t.Helper()
		st := app.Status()
		state, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("state")))
		if err != nil {
			t.Fatal(err)
		}
		rows, err := chromedp.Run(ctx, chromedp.Evaluate[[]row](readRows))
		if err != nil {
			t.Fatal(err)
		}
		var want []row
		for _, p := range st.Partitions {
			phase := "processing"
			if p.Restoring {
				phase = "restoring"
			}
			want = append(want, row{Partition: fmt.Sprint(p.Partition), Phase: phase, RowsIn: fmt.Sprint(p.Counters.RowsIn)})
		}
		if state != st.State || !slices.Equal(rows, want) {
			t.Fatalf("page shows state %q, rows %+v; App.Status: state %q, rows %+v", state, rows, st.State, want)
		}
		// One pipeline: no pipeline column. Several (the automatic
		// Options.Batching.Pipelines on a machine with two cores or more): the
		// column shows each partition's pipeline.
		var pipes []string
		several := false
		for _, p := range st.Partitions {
			pipes = append(pipes, fmt.Sprint(p.Pipeline))
			several = several || p.Pipeline > 0
		}
		if !several {
			if hidden, err := chromedp.Run(ctx, chromedp.Evaluate[bool](`document.getElementById("pipeline-col").hidden && document.querySelectorAll("#partition-rows td.pipeline").length === 0`)); err != nil || !hidden {
				t.Errorf("page shows a pipeline column with one pipeline (%v)", err)
			}
		} else if got, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#partition-rows td.pipeline")].map(td => td.textContent)`)); err != nil || !slices.Equal(got, pipes) {
			t.Errorf("page shows pipelines %q (%v); App.Status: %q", got, err, pipes)
		}
	}

	// Every field of Status filled (restore progress, lag, last error),
	// served by a fake /status whose counters grow on every request.
	app := newApp(t, config(brokers, t.TempDir(), testprocs.NewCounter))
	fake := httptest.NewServer(fakeStatus(app.Handler()))
	t.Cleanup(fake.Close)
	if err := chromedp.Do(ctx, chromedp.Navigate(fake.URL+"/")); err != nil {
		t.Fatal(err)
	}
	waitPage("the fake status, with a chart", `document.getElementById("state").textContent === "Restoring" &&
		document.querySelectorAll("#chart-throughput polyline").length === 2 && document.querySelector("#chart-latency polyline") !== null`)
	for id, want := range map[string]string{
		"app-id": "orders", "caught-up": "No: 1,234 behind", "restoring": "Yes: 1 of 3 partitions",
		"restoring-detail": "2,500 of 10,000 changelog records (25%)", "ready-in": "About 7.5 s", "ready": "no",
		"last-error": `kafka: produce to topic "out" partition 2: NOT_ENOUGH_REPLICAS`,
		"batch":      "20.0 s", "batch-detail": "4,000 records on partition 0; given up at 1 min 0 s",
	} {
		if got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID(id))); err != nil || got != want {
			t.Errorf("fake status: #%s: %q (%v), want %q", id, got, err, want)
		}
	}
	progress, err := chromedp.Run(ctx, chromedp.Evaluate[[]float64](`(p => [p.value, p.max])(document.querySelector("#partition-1 progress"))`))
	if err != nil || !slices.Equal(progress, []float64{2500, 10000}) {
		t.Errorf("fake status: progress bar of partition 1: %v (%v)", progress, err)
	}
	cell, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS("#partition-1 .restore span")))
	if err != nil || cell != "2,500 / 10,000 · 1,000 rec/s · ETA 7.5 s" {
		t.Errorf("fake status: restore cell of partition 1: %q (%v)", cell, err)
	}
	inBatch, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#partition-rows .phase.in-batch")].map(s => s.closest("tr").dataset.partition)`))
	if err != nil || !slices.Equal(inBatch, []string{"0"}) {
		t.Errorf("fake status: partitions marked in batch: %q (%v), want 0", inBatch, err)
	}
	pipes, err := chromedp.Run(ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#partition-rows td.pipeline")].map(td => td.textContent)`))
	if err != nil || !slices.Equal(pipes, []string{"0", "0", "1"}) {
		t.Errorf("fake status: pipeline column: %q (%v), want 0, 0, 1", pipes, err)
	}
	screenshot("0-every-field.png")
	// Running, but no broker answered for a while: not ready, and why.
	fakeKafkaLost.Store(true)
	waitPage("the fake status, Kafka unreachable", `document.getElementById("state").textContent === "Running" &&
		document.getElementById("ready-in").textContent === "When Kafka answers" &&
		document.getElementById("ready-in-detail").textContent.startsWith("Kafka unreachable: no broker has answered for 12s") &&
		document.getElementById("ready").textContent === "no (Kafka unreachable)"`)
	screenshot("0-kafka-unreachable.png")
	fakeKafkaLost.Store(false)
	seen := cons.check(t, 0, nil)

	// Run 1: a running App processes records; the page shows its partitions.
	dir := t.TempDir()
	app = newApp(t, config(brokers, dir, testprocs.NewCounter))
	current.Store(app.Handler())
	stop := testprocs.Start(t, app)
	if err := chromedp.Do(ctx, chromedp.Navigate(pageURL)); err != nil {
		t.Fatal(err)
	}
	// 40 small records of 10 keys, and big ones for a changelog of more
	// than one fetch (8 MiB) a partition: the Counter keeps every row in a
	// list and a map. Random values, so that compression cannot shrink them.
	var input []string
	for i := range 40 {
		input = append(input, fmt.Sprintf("k%02d=v", i%10))
	}
	for i := range bigRecords {
		b := make([]byte, 36<<10)
		_, _ = rand.Read(b)
		input = append(input, fmt.Sprintf("big%03d=%s", i, base64.StdEncoding.EncodeToString(b)))
	}
	testprocs.Produce(t, brokers, "in", input...)
	// 14 MiB of input through the race detector: ~2 s on a quiet machine,
	// more than 20 s once under make test's parallel load on 2 cores.
	testprocs.WaitOutputs(t, brokers, "out", len(input), 90*time.Second)
	// The page must show the App's per-partition counts once every record
	// is processed. They sum to len(input) unless a partition moved between
	// the App's pipelines in its first second (a partition's counters are
	// those of its current task), so the count to wait for is the App's.
	rowsIn := settledRowsIn(t, app, 2)
	waitPage("2 partitions processing, every record in, Running", `document.getElementById("state").textContent === "Running" &&
		[...document.querySelectorAll("#partition-rows tr")].filter(tr => tr.dataset.phase === "processing").length === 2 &&
		[...document.querySelectorAll("#partition-rows tr")].reduce((a, tr) => a + Number(tr.cells[6].textContent.replace(/,/g, "")), 0) === `+fmt.Sprint(rowsIn)+` &&
		document.getElementById("ready-in").textContent === "Ready now"`)
	matches(app)
	// Let the charts get a few points of the 40 records.
	waitPage("a throughput line", `document.querySelector("#chart-throughput polyline") !== null`)
	screenshot("1-running.png")
	seen = cons.check(t, seen, nil)
	if err := stop(); err != nil {
		t.Fatal(err)
	}

	// Run 2 on an empty StateDir restores from the changelog. The broker
	// answers the first changelog fetch of partition 0 (8 MiB at most) and
	// holds the next ones until released, so the restore is in progress,
	// part done, for as long as the test needs to see it.
	changelog := cluster.TopicInfo(app.ChangelogTopic())
	if changelog == nil {
		t.Fatalf("no changelog topic %s", app.ChangelogTopic())
	}
	if p0 := cluster.PartitionInfo(changelog.Topic, 0); p0 == nil || p0.NumBytes < 9<<20 {
		t.Fatalf("changelog partition 0 is too small to take more than one fetch: %+v", p0)
	}
	release := make(chan struct{})
	var released atomic.Bool
	var held atomic.Int32
	cluster.ControlKey(int16(kmsg.Fetch), func(req kmsg.Request) (kmsg.Response, error, bool) {
		if released.Load() {
			return nil, nil, false
		}
		for _, rt := range req.(*kmsg.FetchRequest).Topics {
			if rt.Topic != changelog.Topic && rt.TopicID != changelog.TopicID {
				continue
			}
			for _, rp := range rt.Partitions {
				if rp.Partition == 0 && rp.FetchOffset > 0 {
					held.Add(1)
					cluster.SleepControl(func() { <-release })
					return nil, nil, false
				}
			}
		}
		return nil, nil, false
	})
	releaseOnce := sync.OnceFunc(func() { released.Store(true); close(release) })
	t.Cleanup(releaseOnce)

	app = newApp(t, config(brokers, t.TempDir(), testprocs.NewCounter))
	current.Store(app.Handler())
	stop = testprocs.Start(t, app)
	// Partition 1 may finish its restore or not: the restores share one
	// client, so a held fetch of partition 0 can hold partition 1's too.
	waitPage("partition 0 restoring, partition 1 shown", `document.getElementById("state").textContent === "Restoring" &&
		document.getElementById("partition-0")?.dataset.phase === "restoring" &&
		!!document.getElementById("partition-1")?.dataset.phase`)
	// The page can show the restore while its first fetch is still being
	// applied (slow under -race), before the second one reaches the broker.
	testprocs.Eventually(t, 20*time.Second, "a changelog fetch of partition 0 held by the broker", func() bool {
		return held.Load() > 0
	})
	matches(app)
	// The page shows the restore's progress as Status has it: records done
	// / total ("?" for an unknown total). It converges while the fetch is
	// held, so compare until both agree.
	var done, shown string
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		p0 := app.Status().Partitions[0]
		done = thousands(p0.RestoredRecords) + " / ?"
		if p0.RestoreTotal > 0 {
			done = thousands(p0.RestoredRecords) + " / " + thousands(p0.RestoreTotal)
		}
		// One evaluation reads the cell: a query of its node and then a
		// read of its text failed when the page's refresh replaced the
		// node in between ("No node with given id found", CI 2026-12-05).
		shown, err = chromedp.Run(ctx, chromedp.Evaluate[string](`document.querySelector("#partition-0 .restore span")?.textContent ?? ""`))
		if err == nil && strings.HasPrefix(shown, done+" · ") {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("partition 0's restore: the page shows %q (%v), Status has %s", shown, err, done)
		}
	}
	t.Logf("restore in progress on the page: partition 0 at %q", shown)
	// "Yes: n of 2 partitions", n as Status has it (1, or 2 when partition
	// 1's fetch is held with partition 0's).
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		n := 0
		for _, p := range app.Status().Partitions {
			if p.Restoring {
				n++
			}
		}
		want := fmt.Sprintf("Yes: %d of 2 partitions", n)
		got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("restoring")))
		if err == nil && got == want && n >= 1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("#restoring: %q (%v), want %q", got, err, want)
		}
	}
	if got, err := chromedp.Run(ctx, chromedp.Text(chromedp.ID("ready"))); err != nil || got != "no" {
		t.Fatalf("#ready: %q (%v), want %q", got, err, "no")
	}
	if c, b := get(t, app.Handler(), "/readyz"); c != 503 {
		t.Fatalf("/readyz during the restore: %d %s", c, b)
	}
	screenshot("2-restoring.png")
	seen = cons.check(t, seen, nil)

	// Released, the restore ends; the App is Running and counts on from the
	// restored state.
	releaseOnce()
	waitPage("Running, both partitions processing", `document.getElementById("state").textContent === "Running" &&
		[...document.querySelectorAll("#partition-rows tr")].filter(tr => tr.dataset.phase === "processing").length === 2`)
	testprocs.Produce(t, brokers, "in", "k00=v", "k01=v")
	want(t, pick(testprocs.WaitOutputs(t, brokers, "out", len(input)+2, 60*time.Second), "k00", "k01"), "k00=[1 2 3 4 5] k01=[1 2 3 4 5]")
	waitPage("2 records in", `[...document.querySelectorAll("#partition-rows tr")].reduce((a, tr) => a + Number(tr.cells[6].textContent), 0) === 2`)
	matches(app)
	screenshot("3-ready-after-restore.png")
	seen = cons.check(t, seen, nil)

	// The server goes away: the page says so and shows no stale numbers.
	srv.Close()
	waitPage("disconnected", `!document.getElementById("disconnected").hidden && document.getElementById("data").hidden &&
		document.getElementById("conn").textContent === "disconnected"`)
	screenshot("4-disconnected.png")
	// The failed fetches are logged by the browser as network errors; nothing else may be.
	cons.check(t, seen, func(m chromedp.ConsoleMessage) bool { return m.Source == "network" })
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	t.Logf("status page test took %v; screenshots in %s", time.Since(start).Round(time.Millisecond), shots)
}

// bigRecords is the number of 48 KiB records (~18 MiB) that make the
// changelog of each partition take more than one fetch to restore.
const bigRecords = 400

// thousands formats n as the page does: 12,345.
func thousands(n int64) string {
	s := fmt.Sprint(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}

// pick keeps the outputs of some keys.
func pick(o testprocs.Outputs, keys ...string) testprocs.Outputs {
	out := testprocs.Outputs{}
	for _, k := range keys {
		out[k] = o[k]
	}
	return out
}

// fakeStatus serves page's GET / and, at /status, a Status with every
// field set whose counters grow by 100 records and 2 commits a request.
// fakeKafkaLost makes fakeStatus report a Running App that Kafka does not
// answer (Ready false, ReadyReason "Kafka unreachable: ...").
var fakeKafkaLost atomic.Bool

func fakeStatus(page http.Handler) http.Handler {
	var mu sync.Mutex
	n := int64(0)
	now := time.Now()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/status" {
			page.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		n++
		i := n
		mu.Unlock()
		st := kstate.Status{
			ApplicationID: "orders", InstanceID: "orders-7", State: "Restoring",
			MaxBatchDuration: time.Minute, SinceCommit: 800 * time.Millisecond, FirstCommit: 2 * time.Second,
			LastCommitAt: now.Add(-800 * time.Millisecond),
			LastError:    `kafka: produce to topic "out" partition 2: NOT_ENOUGH_REPLICAS`, LastErrorAt: now.Add(-2 * time.Minute),
			Lag:           1234,
			BatchInFlight: 20 * time.Second, BatchInFlightRecords: 4000,
			Total: kstate.Counters{RowsIn: 100 * i * i, RowsOut: 90 * i * i, Commits: 2 * i, CommitLatency: time.Duration(2*i) * (10 + time.Duration(i%3)) * time.Millisecond, Aborts: 1},
			Partitions: []kstate.PartitionStatus{
				{Partition: 0, Lag: 1000, InBatch: true, BatchID: 17, Watermark: -1, Counters: kstate.Counters{RowsIn: 60 * i * i, RowsOut: 55 * i * i}},
				{Partition: 1, Restoring: true, RestoredRecords: 2500, RestoreTotal: 10000, RestoreRate: 1000, RestoreETA: 7500 * time.Millisecond, Lag: -1, Watermark: -1},
				{Partition: 2, Pipeline: 1, Lag: 234, BatchID: 12, Watermark: 1764518400000, Counters: kstate.Counters{RowsIn: 40 * i * i, RowsOut: 35 * i * i}},
			},
		}
		if fakeKafkaLost.Load() {
			st.State, st.ReadyReason = "Running", "Kafka unreachable: no broker has answered for 12s (last error: unable to dial: dial tcp 10.0.0.7:9092: connect: connection refused)"
		}
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(st)
	})
}

// settledRowsIn waits until app processes n partitions with no batch in
// flight and the same per-partition counts on two reads 300 ms apart, and
// returns the sum of their RowsIn.
func settledRowsIn(t *testing.T, app *kstate.App[string, string, string], n int) int64 {
	t.Helper()
	read := func() (sum int64, ok bool) {
		st := app.Status()
		if len(st.Partitions) != n || st.BatchInFlight != 0 {
			return 0, false
		}
		for _, p := range st.Partitions {
			if p.Restoring {
				return 0, false
			}
			sum += p.Counters.RowsIn
		}
		return sum, true
	}
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		a, ok1 := read()
		time.Sleep(300 * time.Millisecond)
		b, ok2 := read()
		if ok1 && ok2 && a == b && a > 0 {
			return a
		}
	}
	t.Fatalf("App.Status did not settle on %d processing partitions: %+v", n, app.Status().Partitions)
	return 0
}
