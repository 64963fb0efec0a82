package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/murmur2"
	"github.com/kstate/kstate/kafka/kafkatest"
)

// TestRescaleRSS measures the peak memory of `kstate state rescale` (issue
// #25 §4): it writes a changelog of KSTATE_RESCALE_KEYS keys (default
// 300,000) on 4 partitions, a count and a timer per key (3 entries: the
// state, the timer and its by-key index), and runs each kstate binary of
// KSTATE_RESCALE_BINS (colon-separated) under /usr/bin/time -v to 8
// partitions, logging its maximum resident set size. Skipped unless
// KSTATE_RESCALE_BINS is set; KSTATE_RESCALE_MAX_MB fails a binary above
// that many MB.
//
//	go build -o /tmp/kstate-new ./cmd/kstate
//	CI=true KSTATE_RESCALE_BINS=/tmp/kstate-new go test -count=1 -v -run TestRescaleRSS ./cmd/kstate/
func TestRescaleRSS(t *testing.T) {
	bins := os.Getenv("KSTATE_RESCALE_BINS")
	if bins == "" {
		t.Skip("KSTATE_RESCALE_BINS is not set")
	}
	keys := 300_000
	if s := os.Getenv("KSTATE_RESCALE_KEYS"); s != "" {
		var err error
		if keys, err = strconv.Atoi(s); err != nil {
			t.Fatal(err)
		}
	}
	cluster := kafkatest.Start(t, kafkatest.RequireReal())
	brokers := cluster.Brokers()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	const m, n = 4, 8
	in := cluster.CreateTopic(t, "rescale-rss-in", n)
	appA := kafkatest.Name(t, "rescale-rss-a")
	cc := kafka.ClientConfig{Brokers: brokers}
	adm, err := cc.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	if err := adm.EnsureTopic(ctx, kafka.TopicSpec{Name: appA + "-changelog", Partitions: m, ReplicationFactor: -1, Compacted: true}); err != nil {
		t.Fatal(err)
	}
	const reg = `{"id":1,"kind":"value","schema":"int64","schemas":["int64"],"schemaId":1}`
	recs := func(yield func(kafka.Record) bool) {
		rec := func(p int32, k, v []byte) bool {
			return yield(kafka.Record{Topic: appA + "-changelog", Partition: p, Key: k, Value: v})
		}
		for p := range int32(m) {
			for _, e := range [][2][]byte{
				{changelogfmt.MetaKey("var/count"), []byte(reg)},
				{changelogfmt.MetaKey("varid/next"), []byte{0, 0, 0, 2}},
				{changelogfmt.MetaKey(engine.MetaTimeMode), []byte("ProcessingTime")},
				{changelogfmt.MetaKey(engine.MetaBatchID), []byte{0, 0, 0, 0, 0, 0, 0, 9}},
			} {
				if !rec(p, e[0], e[1]) {
					return
				}
			}
		}
		count := changelogfmt.EncodeValue(changelog.Header{Expiry: changelog.NoExpiry}, []byte{0, 0, 0, 0, 0, 0, 0, 3})
		for i := range keys {
			k := fmt.Appendf(nil, "user-%07d", i)
			p := murmur2.Partition(k, m)
			ts := int64(1_750_000_000_000 + i)
			if !rec(p, changelogfmt.StateKey(1, k, nil), count) || !rec(p, changelogfmt.TimerKey(ts, k), []byte{}) || !rec(p, changelogfmt.TimerByKey(k, ts), []byte{}) {
				return
			}
		}
	}
	if _, err := cc.WriteTransactionSeq(ctx, appA+"-gen", 10*time.Minute, recs); err != nil {
		t.Fatal(err)
	}
	offs := map[int32]int64{}
	for p := range int32(m) {
		offs[p] = 0
	}
	if err := adm.CommitGroupOffsets(ctx, appA, in, offs); err != nil {
		t.Fatal(err)
	}
	maxMB, _ := strconv.Atoi(os.Getenv("KSTATE_RESCALE_MAX_MB"))
	rss := regexp.MustCompile(`Maximum resident set size \(kbytes\): (\d+)`)
	wall := regexp.MustCompile(`Elapsed \(wall clock\) time.*: (\S+)`)
	for i, bin := range strings.Split(bins, ":") {
		appB := fmt.Sprintf("%s-b%d", appA, i)
		cmd := exec.CommandContext(ctx, "/usr/bin/time", "-v", bin, "state", "rescale", "--brokers", strings.Join(brokers, ","),
			"--app", appA, "--partitions", strconv.Itoa(n), "--to-app", appB)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", bin, err, out)
		}
		kb := rss.FindSubmatch(out)
		if kb == nil {
			t.Fatalf("%s: no maximum resident set size in\n%s", bin, out)
		}
		mb, _ := strconv.Atoi(string(kb[1]))
		mb /= 1024
		t.Logf("%s: %d keys (%d changelog entries), %d → %d partitions: peak RSS %d MB, wall %s", bin, keys, 3*keys, m, n, mb, wall.FindSubmatch(out)[1])
		if maxMB > 0 && mb > maxMB {
			t.Errorf("%s: peak RSS %d MB, above %d MB\n%s", bin, mb, maxMB, out)
		}
	}
}
