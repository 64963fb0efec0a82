package kafkatest

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/kstate/kstate/kafka/embedded"
)

// embeddedCluster is a private cluster for the helpers' own tests, so that
// they do not start a broker.
func embeddedCluster(t *testing.T) *Cluster {
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return &Cluster{brokers: e.Brokers(), source: "test"}
}

func TestName(t *testing.T) {
	a, b := Name(t, "orders"), Name(t, "orders")
	if a == b || !strings.HasPrefix(a, "orders-") || !strings.HasPrefix(b, "orders-") {
		t.Fatalf("Name gave %q and %q; want two different names starting with orders-", a, b)
	}
}

// Produce partitions by key (Partition 7 of a 3-partition topic would
// fail), keeps the order of one key, and ReadCommitted returns what was
// written, with timestamps.
func TestProduceReadCommitted(t *testing.T) {
	c := embeddedCluster(t)
	topic := c.CreateTopic(t, "words", 3)
	if !strings.HasPrefix(topic, "words-") {
		t.Fatalf("CreateTopic returned %q", topic)
	}
	ts := time.Date(2024, 5, 1, 12, 0, 0, 0, time.UTC)
	var recs []Record
	for i, w := range strings.Fields("a b a c a b") {
		recs = append(recs, Record{Key: []byte(w), Value: []byte(fmt.Sprint(i)), Timestamp: ts.Add(time.Duration(i) * time.Second), Partition: 7})
	}
	c.Produce(t, topic, recs...)

	got := c.ReadCommitted(t, topic, len(recs), 30*time.Second)
	if len(got) != len(recs) {
		t.Fatalf("read %d records, want %d: %v", len(got), len(recs), got)
	}
	byKey := map[string][]string{}
	partOf := map[string]int32{}
	for _, r := range got {
		k := string(r.Key)
		if p, ok := partOf[k]; ok && p != r.Partition {
			t.Errorf("key %q in partitions %d and %d", k, p, r.Partition)
		}
		partOf[k] = r.Partition
		byKey[k] = append(byKey[k], string(r.Value))
		if want := ts.Add(time.Duration(r.Value[0]-'0') * time.Second); !r.Timestamp.Equal(want) {
			t.Errorf("record %q=%q: timestamp %v, want %v", r.Key, r.Value, r.Timestamp, want)
		}
	}
	if want := map[string]string{"a": "0 2 4", "b": "1 5", "c": "3"}; fmt.Sprint(want) != fmt.Sprint(joinAll(byKey)) {
		t.Fatalf("values by key %v, want %v", joinAll(byKey), want)
	}
}

func joinAll(m map[string][]string) map[string]string {
	out := map[string]string{}
	for k, v := range m {
		out[k] = strings.Join(v, " ")
	}
	return out
}

// fatalTB records the failure of a helper instead of failing the test.
type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Helper() {}
func (f *fatalTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	runtime.Goexit()
}

// ReadCommitted gives up after its timeout and says what it saw.
func TestReadCommittedTimeout(t *testing.T) {
	c := embeddedCluster(t)
	topic := c.CreateTopic(t, "short", 1)
	c.Produce(t, topic, Record{Key: []byte("k"), Value: []byte("v")})

	f := &fatalTB{TB: t}
	done := make(chan time.Duration)
	go func() {
		start := time.Now()
		defer func() { done <- time.Since(start) }()
		c.ReadCommitted(f, topic, 2, 2*time.Second)
	}()
	took := <-done
	want := fmt.Sprintf(`kafkatest: 2 committed records on %q not seen within 2s; have 1: p0@0 "k"="v"`, topic)
	if f.msg != want {
		t.Fatalf("failure message %q, want %q", f.msg, want)
	}
	if took > 10*time.Second {
		t.Fatalf("ReadCommitted took %v with a 2s timeout", took)
	}
}
