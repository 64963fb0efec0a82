package testprocs

import (
	"context"
	"encoding/json"
	"fmt"
	"iter"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/processor"
)

// RealLag is the consumer lag of group on topic as Kafka sees it, per
// partition: the last stable offset (the end of what a read_committed
// consumer reads) minus the group's committed offset (the log start, 0
// here, when the group committed none for the partition).
func RealLag(brokers []string, group, topic string) (map[int32]int64, error) {
	adm, err := kafka.NewAdmin(brokers)
	if err != nil {
		return nil, err
	}
	defer adm.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	ends, err := adm.StableOffsets(ctx, topic)
	if err != nil {
		return nil, err
	}
	committed, err := adm.CommittedOffsets(ctx, group, topic)
	if err != nil {
		return nil, err
	}
	lag := make(map[int32]int64, len(ends))
	for p, end := range ends {
		lag[p] = end - committed[p]
	}
	return lag, nil
}

// AppLag is what an App's handler h reports of its consumer lag: the
// kstate_consumer_lag series of GET /metrics and the partitions' lag of
// GET /status, per partition, and the status' total.
type AppLag struct {
	Metrics, Status map[int32]int64
	Total           int64
	// BatchInFlight is the status' batch age; InBatch its partitions.
	BatchInFlight time.Duration
	InBatch       []int32
}

// ReadAppLag reads AppLag from h.
func ReadAppLag(t testing.TB, h http.Handler) AppLag {
	t.Helper()
	l := AppLag{Metrics: map[int32]int64{}, Status: map[int32]int64{}}
	for p, v := range Scrape(t, h).Series("kstate_consumer_lag", "partition") {
		n, err := strconv.Atoi(p)
		if err != nil {
			t.Fatalf("kstate_consumer_lag{partition=%q}", p)
		}
		l.Metrics[int32(n)] = int64(v)
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/status", nil))
	var st struct {
		Lag           int64 `json:"lag"`
		BatchInFlight int64 `json:"batch_in_flight_ns"`
		Partitions    []struct {
			Partition int32 `json:"partition"`
			Lag       int64 `json:"lag"`
			InBatch   bool  `json:"in_batch"`
		} `json:"partitions"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &st); err != nil {
		t.Fatalf("GET /status: %v\n%s", err, rec.Body.String())
	}
	l.Total, l.BatchInFlight = st.Lag, time.Duration(st.BatchInFlight)
	for _, p := range st.Partitions {
		l.Status[p.Partition] = p.Lag
		if p.InBatch {
			l.InBatch = append(l.InBatch, p.Partition)
		}
	}
	return l
}

// Matches reports whether both views of l equal real on every partition
// of real, and the total their sum.
func (l AppLag) Matches(real map[int32]int64) bool {
	var sum int64
	for p, r := range real {
		m, ok := l.Metrics[p]
		if !ok || m != r || l.Status[p] != r {
			return false
		}
		sum += r
	}
	return len(l.Metrics) == len(real) && l.Total == sum
}

func (l AppLag) String() string {
	return fmt.Sprintf("/metrics %v, /status %v (total %d), batch in flight %v on %v", l.Metrics, l.Status, l.Total, l.BatchInFlight, l.InBatch)
}

// GatedCounter is the Counter whose HandleInputRows blocks on the key
// "stuck" until Release is closed, after sending on Entered: a batch stuck
// in a processor call, for the lag tests.
type GatedCounter struct {
	*Counter
	Entered chan struct{}
	Release chan struct{}
}

func (g *GatedCounter) HandleInputRows(key string, rows iter.Seq[string], tv processor.TimerValues, out processor.Emitter[string]) error {
	if key == "stuck" {
		g.Entered <- struct{}{}
		<-g.Release
	}
	return g.Counter.HandleInputRows(key, rows, tv, out)
}
