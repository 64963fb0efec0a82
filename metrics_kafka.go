package kstate

import (
	"net"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/plugin/kprom"

	"github.com/kstate/kstate/internal/kafka"
)

// kafkaMetrics collects the Kafka client metrics of the clients an App
// creates (franz-go's kprom plugin: connections, bytes and records
// produced and fetched per broker and topic, buffered records, request
// latency), as kstate_kafka_* series with the labels application and
// client: "admin" for Run's admin client (topic checks, offsets, the
// restores' changelog reads), "pipeline-<i>" for each pipeline's consumer
// and transactional producer. GET /metrics of Handler serves them.
//
// A kprom.Metrics instruments one client (its buffered-records gauges read
// that client), so each client role gets its own, created with the client
// and registered nowhere (kprom.Registry(nil)): this collector gathers the
// current one of each role. A new Run replaces them (the counters start
// again, which rate() handles), so several pipelines and restarts of Run
// never register a series twice.
type kafkaMetrics struct {
	app string
	mu  sync.Mutex
	by  map[string]*kprom.Metrics // by client role
	// reach is fed by the same hooks, for readiness (reach.go).
	reach kafkaReach
}

func newKafkaMetrics(app string) *kafkaMetrics {
	return &kafkaMetrics{app: app, by: map[string]*kprom.Metrics{}}
}

// clientConfig returns cc with a hook that instruments the clients made
// from it as client. The first client made from it owns the series; the
// short-lived clients made from the same config (a session's group leave)
// add their traffic to them.
func (k *kafkaMetrics) clientConfig(cc kafka.ClientConfig, client string) kafka.ClientConfig {
	m := kprom.NewMetrics("kstate",
		kprom.Subsystem("kafka"),
		kprom.Registry(nil), // gathered by Collect
		kprom.WithStaticLabel(prometheus.Labels{"application": k.app, "client": client}),
		kprom.FetchAndProduceDetail(kprom.ByNode, kprom.ByTopic, kprom.Records, kprom.UncompressedBytes, kprom.CompressedBytes, kprom.ConsistentNaming),
		kprom.Histograms(kprom.RequestDurationE2E),
	)
	h := &kafkaHook{k: k, client: client, m: m}
	cc.Extra = append(slices.Clone(cc.Extra), kgo.WithHooks(h))
	return cc
}

// Describe implements prometheus.Collector: it describes nothing (an
// unchecked collector), as the series come with the clients.
func (k *kafkaMetrics) Describe(chan<- *prometheus.Desc) {}

// Collect implements prometheus.Collector.
func (k *kafkaMetrics) Collect(ch chan<- prometheus.Metric) {
	k.mu.Lock()
	ms := make([]*kprom.Metrics, 0, len(k.by))
	for _, m := range k.by {
		ms = append(ms, m)
	}
	k.mu.Unlock()
	for _, m := range ms {
		m.Collect(ch)
	}
}

// kafkaHook passes a client's events to its kprom.Metrics, which it
// publishes once the first client initialised it.
type kafkaHook struct {
	k      *kafkaMetrics
	client string
	m      *kprom.Metrics
	once   sync.Once
}

var (
	_ kgo.HookNewClient           = (*kafkaHook)(nil)
	_ kgo.HookBrokerConnect       = (*kafkaHook)(nil)
	_ kgo.HookBrokerDisconnect    = (*kafkaHook)(nil)
	_ kgo.HookBrokerThrottle      = (*kafkaHook)(nil)
	_ kgo.HookBrokerE2E           = (*kafkaHook)(nil)
	_ kgo.HookProduceBatchWritten = (*kafkaHook)(nil)
	_ kgo.HookFetchBatchRead      = (*kafkaHook)(nil)
)

// OnNewClient initialises the metrics with the first client (kgo calls it
// before the client starts any goroutine; a later client's events follow
// its own OnNewClient, so they find them initialised).
func (h *kafkaHook) OnNewClient(cl *kgo.Client) {
	h.once.Do(func() {
		h.m.OnNewClient(cl)
		h.k.mu.Lock()
		h.k.by[h.client] = h.m
		h.k.mu.Unlock()
	})
}

func (h *kafkaHook) OnBrokerConnect(meta kgo.BrokerMetadata, d time.Duration, c net.Conn, err error) {
	h.m.OnBrokerConnect(meta, d, c, err)
	if err != nil {
		h.k.reach.failed(err)
	}
}

func (h *kafkaHook) OnBrokerDisconnect(meta kgo.BrokerMetadata, c net.Conn) {
	h.m.OnBrokerDisconnect(meta, c)
}

func (h *kafkaHook) OnBrokerThrottle(meta kgo.BrokerMetadata, d time.Duration, after bool) {
	h.m.OnBrokerThrottle(meta, d, after)
}

func (h *kafkaHook) OnBrokerE2E(meta kgo.BrokerMetadata, key int16, e2e kgo.BrokerE2E) {
	h.m.OnBrokerE2E(meta, key, e2e)
	if err := e2e.Err(); err != nil {
		h.k.reach.failed(err)
	} else {
		h.k.reach.answered()
	}
}

func (h *kafkaHook) OnProduceBatchWritten(meta kgo.BrokerMetadata, topic string, p int32, m kgo.ProduceBatchMetrics) {
	h.m.OnProduceBatchWritten(meta, topic, p, m)
}

func (h *kafkaHook) OnFetchBatchRead(meta kgo.BrokerMetadata, topic string, p int32, m kgo.FetchBatchMetrics) {
	h.m.OnFetchBatchRead(meta, topic, p, m)
}

// pipelineClient is the client label of the session of the pipeline whose
// instance id is instance (pipelineInstanceID).
func (a *App[K, I, O]) pipelineClient(instance string) string {
	if instance == a.cfg.InstanceID {
		return "pipeline-0"
	}
	return "pipeline-" + strings.TrimPrefix(instance, a.cfg.InstanceID+"-p")
}
