package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/kstate/kstate/internal/kafka"
)

// The group protocols the protocol mode compares.
const (
	protoClassic  = "classic"  // JoinGroup/SyncGroup, cooperative-sticky balancer on the client
	protoConsumer = "consumer" // KIP-848: ConsumerGroupHeartbeat, the broker's "uniform" assignor
)

// Rebalances of the protocol mode.
const (
	rbJoin       = "join"        // a member joins a group of members-1
	rbLeave      = "leave"       // a dynamic member leaves (LeaveGroup / epoch -1)
	rbStaticStop = "static-stop" // a static member stops without leaving: its partitions wait for the session timeout
)

// Classic-protocol timing of the protocol mode: kstate's (SessionConfig's
// defaults; heartbeatInterval).
const (
	classicSession   = 10 * time.Second
	classicHeartbeat = 3 * time.Second
)

type protocolOptions struct {
	Brokers    []string
	Protocols  []string
	Members    int
	Partitions int
	Repeats    int
	Static     bool // also measure rbStaticStop once per protocol
	// Heartbeat is the classic protocol's heartbeat interval (0:
	// classicHeartbeat, kstate's).
	Heartbeat time.Duration
	Log       io.Writer
}

type protocolResult struct {
	Protocol  string
	Rebalance string
	Took      time.Duration // event → every member has its assignment and consumed each of its partitions
}

// member is one plain franz-go group member: it tracks when it got each
// partition and when it last consumed a record of each.
type member struct {
	cl     *kgo.Client
	cancel context.CancelFunc
	done   chan struct{}
	mu     sync.Mutex
	owned  map[int32]time.Time // partition → when assigned
	last   map[int32]time.Time // partition → when a record of it was last consumed
}

func newMember(o protocolOptions, proto, group, topic, instanceID string) (*member, error) {
	m := &member{owned: make(map[int32]time.Time), last: make(map[int32]time.Time), done: make(chan struct{})}
	opts := []kgo.Opt{
		kgo.SeedBrokers(o.Brokers...),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.DisableAutoCommit(),
		// No commits: a new owner starts at the end and consumes the
		// next record produced (the input flows at 100 records/s per
		// partition), so "consumes" means "has fetched since assigned".
		kgo.ConsumeResetOffset(kgo.NewOffset().AtEnd()),
		kgo.FetchMaxWait(100 * time.Millisecond),
		kgo.OnPartitionsAssigned(func(_ context.Context, _ *kgo.Client, a map[string][]int32) {
			now := time.Now()
			m.mu.Lock()
			for _, p := range a[topic] {
				m.owned[p] = now
			}
			m.mu.Unlock()
		}),
		kgo.OnPartitionsRevoked(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.drop(r[topic]) }),
		kgo.OnPartitionsLost(func(_ context.Context, _ *kgo.Client, r map[string][]int32) { m.drop(r[topic]) }),
	}
	switch proto {
	case protoClassic:
		opts = append(opts, kgo.Balancers(kgo.CooperativeStickyBalancer()),
			kgo.SessionTimeout(classicSession), kgo.HeartbeatInterval(cmp.Or(o.Heartbeat, classicHeartbeat)))
	case protoConsumer:
		// The broker owns the session timeout and heartbeat interval
		// (group.consumer.session.timeout.ms, .heartbeat.interval.ms).
		opts = append(opts, kgo.Balancers(kgo.StickyBalancer()), kgo.ServerSideBalancer())
	default:
		return nil, fmt.Errorf("protocol: unknown protocol %q", proto)
	}
	if instanceID != "" {
		opts = append(opts, kgo.InstanceID(instanceID))
	}
	cl, err := kgo.NewClient(opts...)
	if err != nil {
		return nil, err
	}
	ctx, cancel := context.WithCancel(context.Background())
	m.cl, m.cancel = cl, cancel
	go func() {
		defer close(m.done)
		for {
			fs := cl.PollFetches(ctx)
			if ctx.Err() != nil || fs.IsClientClosed() {
				return
			}
			now := time.Now()
			m.mu.Lock()
			fs.EachRecord(func(r *kgo.Record) {
				if _, ok := m.owned[r.Partition]; ok {
					m.last[r.Partition] = now
				}
			})
			m.mu.Unlock()
		}
	}()
	return m, nil
}

func (m *member) drop(ps []int32) {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, p := range ps {
		delete(m.owned, p)
		delete(m.last, p)
	}
}

// close leaves the group (a dynamic member; a static one only stops).
func (m *member) close() {
	m.cancel()
	m.cl.Close()
	<-m.done
}

// complete says whether members hold every partition once, balanced
// (counts differ by at most one), and each member consumed a record of
// each of its partitions after both since and its assignment.
func complete(members []*member, partitions int, since time.Time) bool {
	seen := make([]bool, partitions)
	lo, hi := partitions, 0
	for _, m := range members {
		m.mu.Lock()
		n := len(m.owned)
		for p, at := range m.owned {
			if int(p) >= partitions || seen[p] {
				m.mu.Unlock()
				return false
			}
			seen[p] = true
			l, ok := m.last[p]
			if !ok || !l.After(since) || !l.After(at) {
				m.mu.Unlock()
				return false
			}
		}
		m.mu.Unlock()
		lo, hi = min(lo, n), max(hi, n)
	}
	return !slices.Contains(seen, false) && hi-lo <= 1
}

// waitComplete polls complete every 10 ms until limit.
func waitComplete(members []*member, partitions int, since time.Time, limit time.Duration) (time.Duration, error) {
	for time.Since(since) < limit {
		if complete(members, partitions, since) {
			return time.Since(since), nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("the group of %d members did not hold and consume every partition within %v", len(members), limit)
}

func runProtocol(ctx context.Context, o protocolOptions) ([]protocolResult, error) {
	if o.Members < 2 || o.Partitions < o.Members || o.Repeats < 1 {
		return nil, fmt.Errorf("protocol: want -members >= 2, -partitions >= members, -repeats >= 1 (got %d, %d, %d)", o.Members, o.Partitions, o.Repeats)
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(o.Log, "%s protocol: "+format+"\n", append([]any{time.Now().Format("15:04:05.000")}, args...)...)
	}
	id := fmt.Sprintf("%x", time.Now().UnixNano()&0xffffff)
	topic := "protocol-" + id
	ka, err := kafka.NewAdmin(o.Brokers)
	if err != nil {
		return nil, err
	}
	defer ka.Close()
	if err := ka.EnsureTopic(ctx, kafka.TopicSpec{Name: topic, Partitions: o.Partitions, ReplicationFactor: -1}); err != nil {
		return nil, err
	}
	prod, err := kgo.NewClient(kgo.SeedBrokers(o.Brokers...), kgo.DefaultProduceTopic(topic), kgo.ProducerLinger(0),
		kgo.RecordPartitioner(kgo.ManualPartitioner()))
	if err != nil {
		return nil, err
	}
	defer prod.Close()
	pctx, pcancel := context.WithCancel(ctx)
	defer pcancel()
	var perr error
	var wg sync.WaitGroup
	defer wg.Wait()
	wg.Go(func() {
		// 100 records/s per partition: a new owner's first record is
		// at most 10 ms away.
		t := time.NewTicker(10 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-pctx.Done():
				return
			case <-t.C:
			}
			recs := make([]*kgo.Record, o.Partitions)
			for p := range recs {
				recs[p] = &kgo.Record{Partition: int32(p), Value: []byte("x")}
			}
			if err := prod.ProduceSync(pctx, recs...).FirstErr(); err != nil {
				if pctx.Err() == nil {
					perr = err
				}
				return
			}
		}
	})

	var results []protocolResult
	limit := 2 * time.Minute
	for rep := range o.Repeats {
		for _, proto := range o.Protocols {
			group := fmt.Sprintf("protocol-%s-%s-%d", id, proto, rep)
			var ms []*member
			closeAll := func() {
				for _, m := range ms {
					m.close()
				}
			}
			for range o.Members - 1 {
				m, err := newMember(o, proto, group, topic, "")
				if err != nil {
					closeAll()
					return results, err
				}
				ms = append(ms, m)
			}
			if _, err := waitComplete(ms, o.Partitions, time.Now(), limit); err != nil {
				closeAll()
				return results, fmt.Errorf("%s: forming the group: %w", proto, err)
			}
			time.Sleep(time.Second)
			t0 := time.Now()
			m, err := newMember(o, proto, group, topic, "")
			if err != nil {
				closeAll()
				return results, err
			}
			ms = append(ms, m)
			took, err := waitComplete(ms, o.Partitions, t0, limit)
			if err != nil {
				closeAll()
				return results, fmt.Errorf("%s %s: %w", proto, rbJoin, err)
			}
			logf("%-8s %-11s %v", proto, rbJoin, took.Round(time.Millisecond))
			results = append(results, protocolResult{proto, rbJoin, took})

			time.Sleep(time.Second)
			t0 = time.Now()
			last := ms[len(ms)-1]
			ms = ms[:len(ms)-1]
			go last.close() // Close returns after the leave; the clock runs from t0
			took, err = waitComplete(ms, o.Partitions, t0, limit)
			<-last.done
			closeAll()
			if err != nil {
				return results, fmt.Errorf("%s %s: %w", proto, rbLeave, err)
			}
			logf("%-8s %-11s %v", proto, rbLeave, took.Round(time.Millisecond))
			results = append(results, protocolResult{proto, rbLeave, took})
		}
	}
	if o.Static {
		for _, proto := range o.Protocols {
			group := fmt.Sprintf("protocol-%s-%s-static", id, proto)
			var ms []*member
			for i := range o.Members {
				m, err := newMember(o, proto, group, topic, fmt.Sprintf("m%d", i))
				if err != nil {
					for _, m := range ms {
						m.close()
					}
					return results, err
				}
				ms = append(ms, m)
			}
			if _, err := waitComplete(ms, o.Partitions, time.Now(), limit); err != nil {
				return results, fmt.Errorf("%s: forming the static group: %w", proto, err)
			}
			time.Sleep(time.Second)
			t0 := time.Now()
			last := ms[len(ms)-1]
			ms = ms[:len(ms)-1]
			go last.close()
			took, err := waitComplete(ms, o.Partitions, t0, limit)
			<-last.done
			for _, m := range ms {
				m.close()
			}
			if err != nil {
				return results, fmt.Errorf("%s %s: %w", proto, rbStaticStop, err)
			}
			logf("%-8s %-11s %v", proto, rbStaticStop, took.Round(time.Millisecond))
			results = append(results, protocolResult{proto, rbStaticStop, took})
		}
	}
	pcancel()
	wg.Wait()
	if perr != nil {
		return results, errors.Join(errors.New("protocol: produce"), perr)
	}
	return results, nil
}
