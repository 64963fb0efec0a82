package kafka

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Admin manages topics and reads offsets.
type Admin struct {
	cl  *kgo.Client
	adm *kadm.Client
	// created holds the topics this Admin created (or found created by
	// someone else while creating them: TOPIC_ALREADY_EXISTS), with when:
	// Partitions waits for such a topic instead of calling it missing
	// (propagationPatience).
	created sync.Map // topic → time.Time
}

// TopicSpec describes a topic kstate needs.
type TopicSpec struct {
	Name string
	// Partitions; <= 0 means the broker's default (num.partitions), and
	// then the partition count of an existing topic is not checked.
	Partitions int
	// ReplicationFactor; <= 0 (conventionally -1) means the broker's
	// default.replication.factor, which is what a one-broker cluster needs.
	// Creating a topic with more replicas than the cluster has live brokers
	// fails with an error wrapping ErrReplicationFactor.
	ReplicationFactor int16
	// MinInsyncReplicas, when positive, sets min.insync.replicas when
	// creating; <= 0 means the broker's default.
	MinInsyncReplicas int
	// Compacted sets cleanup.policy=compact and requires it of an existing
	// topic (exactly "compact": "compact,delete" would let retention
	// delete state).
	Compacted bool
	// Configs are extra topic configs, applied only when creating.
	Configs map[string]string
}

// NewAdmin connects to the cluster (lazily: errors show on first use).
func NewAdmin(brokers []string) (*Admin, error) { return ClientConfig{Brokers: brokers}.NewAdmin() }

// NewAdmin is NewAdmin with c's TLS, SASL and extra options.
func (c ClientConfig) NewAdmin() (*Admin, error) {
	if len(c.Brokers) == 0 {
		return nil, errors.New("kafka: NewAdmin: no brokers")
	}
	cl, err := kgo.NewClient(c.toolOpts()...)
	if err != nil {
		return nil, fmt.Errorf("kafka: new admin client: %w", err)
	}
	return &Admin{cl: cl, adm: kadm.NewClient(cl)}, nil
}

// toolOpts are the options of the short-lived admin, reader and ReadAll
// clients. kadm answers topic questions from kgo's metadata cache, which by
// default keeps even "topic does not exist" for 5s (MetadataMinAge): a topic
// created a moment ago would look missing, and a new partition leader
// stale. These clients ask rarely, so a short cache costs nothing.
func (c ClientConfig) toolOpts() []kgo.Opt {
	return append(c.Opts(), kgo.MetadataMinAge(toolMetadataMinAge))
}

const (
	toolMetadataMinAge = 20 * time.Millisecond
	// clientMetadataMinAge, overriding kgo's 5s, lets a producer or session
	// started right after a topic was created find it quickly.
	clientMetadataMinAge = 250 * time.Millisecond
	// describeConfigsPatience bounds how long topicConfig waits for a
	// broker to learn of a topic another broker (the controller) created.
	describeConfigsPatience = 5 * time.Second
	// propagationPatience bounds how long after creating a topic Partitions
	// retries UNKNOWN_TOPIC_OR_PARTITION for it: on a cluster of several
	// brokers the controller acknowledges a creation before every broker
	// has the topic in its metadata, and a metadata request goes to any
	// broker (seen on the three-broker test cluster: "dead-letter topic …
	// topic not found" right after creating it). The caller's ctx (the
	// start-up's deadline) bounds it too.
	propagationPatience = 30 * time.Second
)

// unknownTopicPatience bounds how long Partitions asks again, on a
// cluster of several brokers, for a topic it did not create that a
// broker called unknown: the time a topic created elsewhere a moment
// ago takes to reach every broker (docs/RELIABILITY.md, Findings 1 and
// 5: the output topic and the changelog at start-up). A topic really
// missing is reported this much later there. A variable for tests.
var unknownTopicPatience = 10 * time.Second

// Close releases the client.
func (a *Admin) Close() { a.cl.Close() }

// Partitions returns the partition count of topic, or an error wrapping
// ErrTopicNotFound.
//
// A topic this Admin created a moment ago (EnsureTopic) that a broker does
// not know yet is not missing: its UNKNOWN_TOPIC_OR_PARTITION is retried
// with backoff for up to propagationPatience after the creation, within
// ctx. On a cluster of several brokers a topic another process created a
// moment ago (the output topic a deployment script just made, the
// changelog another instance just created) is unknown to some brokers for
// a while too: there "not found" is asked again, each time with a fresh
// metadata request, for up to unknownTopicPatience within ctx before the
// topic is missing. On one broker a topic it does not know is missing at
// once.
func (a *Admin) Partitions(ctx context.Context, topic string) (int, error) {
	var missingSince time.Time // first "not found" of a topic not just created, on several brokers
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		td, err := describeTopic(ctx, a.adm, topic)
		if err == nil {
			return len(td.Partitions), nil
		}
		if !errors.Is(err, ErrTopicNotFound) {
			return 0, err
		}
		if !a.justCreated(topic, delay) {
			if missingSince.IsZero() {
				if n, lerr := a.liveBrokers(ctx); lerr != nil || n < 2 {
					return 0, err
				}
				if a.controllerLacks(ctx, topic) {
					return 0, err
				}
				missingSince = time.Now()
			}
			if time.Since(missingSince)+delay >= unknownTopicPatience {
				return 0, err
			}
			// Past the metadata cache: a fresh request, maybe to
			// another broker.
			delay = max(delay, 2*toolMetadataMinAge)
		}
		select {
		case <-ctx.Done():
			return 0, err
		case <-time.After(delay):
		}
	}
}

// controllerLacks reports whether the cluster's controller says topic does
// not exist: a CreateTopics with ValidateOnly, which the controller answers
// from its own view (TOPIC_ALREADY_EXISTS for a topic it has, however far
// the metadata has spread to the brokers), and which creates nothing. So a
// topic really missing on a cluster of several brokers (a new
// application's changelog, before it is created) is reported at once
// instead of after unknownTopicPatience: 10 s off every first start on such
// a cluster. Any other answer (no Create permission on the topic, a create
// policy, an old broker) is not an answer: false, and Partitions waits.
func (a *Admin) controllerLacks(ctx context.Context, topic string) bool {
	req := kmsg.NewPtrCreateTopicsRequest()
	req.ValidateOnly = true
	req.TimeoutMillis = 5000
	rt := kmsg.NewCreateTopicsRequestTopic()
	rt.Topic = topic
	rt.NumPartitions = -1
	rt.ReplicationFactor = -1
	req.Topics = append(req.Topics, rt)
	resp, err := req.RequestWith(ctx, a.cl)
	if err != nil || len(resp.Topics) != 1 {
		return false
	}
	return resp.Topics[0].ErrorCode == 0
}

// justCreated reports whether this Admin created topic less than
// propagationPatience ago, leaving at least delay.
func (a *Admin) justCreated(topic string, delay time.Duration) bool {
	at, ok := a.created.Load(topic)
	return ok && time.Since(at.(time.Time))+delay < propagationPatience
}

// describeTopic returns topic's metadata or an error wrapping
// ErrTopicNotFound.
func describeTopic(ctx context.Context, adm *kadm.Client, topic string) (kadm.TopicDetail, error) {
	tds, err := adm.ListTopics(ctx, topic)
	if err != nil {
		return kadm.TopicDetail{}, fmt.Errorf("kafka: describe topic %q: %w", topic, access{topic: topic}.classify(err))
	}
	td, ok := tds[topic]
	switch {
	case !ok, errors.Is(td.Err, kerr.UnknownTopicOrPartition):
		return kadm.TopicDetail{}, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
	case td.Err != nil:
		return kadm.TopicDetail{}, fmt.Errorf("kafka: describe topic %q: %w", topic, access{topic: topic}.classify(td.Err))
	}
	return td, nil
}

// EnsureTopic creates the topic when it is missing and otherwise checks it
// against spec, returning a *TopicMismatchError on a difference. It returns
// once the topic's metadata shows all its partitions, so a reader or producer
// started right after does not race the creation.
func (a *Admin) EnsureTopic(ctx context.Context, spec TopicSpec) error {
	if spec.Name == "" {
		return errors.New("kafka: EnsureTopic: empty topic name")
	}
	_, err := describeTopic(ctx, a.adm, spec.Name)
	if errors.Is(err, ErrTopicNotFound) {
		err = a.create(ctx, spec)
		if err == nil || errors.Is(err, kerr.TopicAlreadyExists) {
			a.created.Store(spec.Name, time.Now())
		}
		if errors.Is(err, kerr.TopicAlreadyExists) {
			err = nil // lost a race with another instance; validate theirs
		} else if err != nil {
			return err
		}
		if err := a.waitVisible(ctx, spec); err != nil {
			return err
		}
	} else if err != nil {
		return err
	}
	return a.validate(ctx, spec)
}

func (a *Admin) create(ctx context.Context, spec TopicSpec) error {
	configs := make(map[string]*string, len(spec.Configs)+1)
	for k, v := range spec.Configs {
		configs[k] = kadm.StringPtr(v)
	}
	if spec.Compacted {
		if p, ok := spec.Configs["cleanup.policy"]; ok && p != "compact" {
			return fmt.Errorf("kafka: EnsureTopic %q: Compacted conflicts with cleanup.policy=%s in Configs", spec.Name, p)
		}
		configs["cleanup.policy"] = kadm.StringPtr("compact")
	}
	if spec.MinInsyncReplicas > 0 {
		configs["min.insync.replicas"] = kadm.StringPtr(strconv.Itoa(spec.MinInsyncReplicas))
	}
	partitions := int32(spec.Partitions)
	if partitions <= 0 {
		partitions = -1
	}
	rf := spec.ReplicationFactor
	if rf <= 0 {
		rf = -1
	} else {
		n, err := a.liveBrokers(ctx)
		if err != nil {
			return err
		}
		if int(rf) > n {
			return fmt.Errorf("%w: creating topic %q with replication factor %d needs %d brokers, the cluster has %d live",
				ErrReplicationFactor, spec.Name, rf, rf, n)
		}
	}
	if _, err := a.adm.CreateTopic(ctx, partitions, rf, configs, spec.Name); err != nil {
		if errors.Is(err, kerr.InvalidReplicationFactor) {
			// More replicas than brokers (one stopped since we counted,
			// or the broker's default.replication.factor).
			err = fmt.Errorf("%w: %w", ErrReplicationFactor, err)
		}
		err = access{topicOp: "Create", topic: spec.Name, clusterOp: "Create"}.classify(err)
		return fmt.Errorf("kafka: create topic %q (partitions %d, replication %d, configs %v): %w",
			spec.Name, partitions, rf, spec.Configs, err)
	}
	return nil
}

// waitVisible polls metadata until the new topic shows every partition with
// a leader: a real broker acknowledges a creation before all brokers know it.
func (a *Admin) waitVisible(ctx context.Context, spec TopicSpec) error {
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		td, err := describeTopic(ctx, a.adm, spec.Name)
		if err == nil && len(td.Partitions) > 0 && (spec.Partitions <= 0 || len(td.Partitions) >= spec.Partitions) {
			ready := true
			for _, p := range td.Partitions {
				ready = ready && p.Err == nil && p.Leader >= 0
			}
			if ready {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: topic %q created but not visible in metadata: %w", spec.Name, ctx.Err())
		case <-time.After(delay):
		}
	}
}

func (a *Admin) validate(ctx context.Context, spec TopicSpec) error {
	if spec.Partitions > 0 {
		n, err := a.Partitions(ctx, spec.Name)
		if err != nil {
			return err
		}
		if n != spec.Partitions {
			return &TopicMismatchError{Topic: spec.Name, What: "partitions", Want: strconv.Itoa(spec.Partitions), Got: strconv.Itoa(n)}
		}
	}
	if spec.Compacted {
		policy, err := a.topicConfig(ctx, spec.Name, "cleanup.policy")
		if err != nil {
			return err
		}
		if policy != "compact" {
			return &TopicMismatchError{Topic: spec.Name, What: "cleanup.policy", Want: "compact", Got: policy}
		}
	}
	return nil
}

// topicConfig returns the effective value of one topic config. The topic is
// known to exist (metadata showed it), but the broker answering
// DescribeConfigs may not have a topic created a moment ago in its metadata
// yet; its UNKNOWN_TOPIC_OR_PARTITION is retried for up to
// describeConfigsPatience.
func (a *Admin) topicConfig(ctx context.Context, topic, key string) (string, error) {
	var rc kadm.ResourceConfig
	deadline := time.Now().Add(describeConfigsPatience)
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		rcs, err := a.adm.DescribeTopicConfigs(ctx, topic)
		if err != nil {
			err = access{topicOp: "DescribeConfigs", topic: topic}.classify(err)
			return "", fmt.Errorf("kafka: describe configs of topic %q: %w", topic, err)
		}
		rc, err = rcs.On(topic, nil)
		if err == nil {
			err = rc.Err
		}
		if err == nil {
			break
		}
		if errors.Is(err, kerr.UnknownTopicOrPartition) && time.Now().Add(delay).Before(deadline) {
			select {
			case <-ctx.Done():
			case <-time.After(delay):
				continue
			}
		}
		err = access{topicOp: "DescribeConfigs", topic: topic}.classify(err)
		return "", fmt.Errorf("kafka: describe configs of topic %q: %w", topic, err)
	}
	for _, c := range rc.Configs {
		if c.Key == key {
			if c.Value == nil {
				return "", nil
			}
			return *c.Value, nil
		}
	}
	return "", nil
}

// CommittedOffsets returns the group's committed offsets of topic, by
// partition; partitions without a commit are absent. It waits for pending
// transactional commits to resolve (KIP-447 RequireStable) so the answer
// never includes an offset that may still be aborted.
//
// A group that does not exist has no committed offsets: the empty map, not
// an error. A real broker answers an offset fetch for an unknown group with
// no offsets; kfake (kafka/embedded) answers GROUP_ID_NOT_FOUND, and so
// would a broker for a group deleted in between. A coordinator not
// available yet (a new cluster creating its offsets topic: the first group
// of a fresh broker) is waited for up to coordinatorWait.
func (a *Admin) CommittedOffsets(ctx context.Context, group, topic string) (map[int32]int64, error) {
	start := time.Now()
	for delay := 10 * time.Millisecond; ; delay = min(2*delay, 500*time.Millisecond) {
		out, err := a.committedOnce(ctx, group, topic)
		retry := errors.Is(err, kerr.UnstableOffsetCommit) ||
			(time.Since(start) < coordinatorWait &&
				(errors.Is(err, kerr.CoordinatorNotAvailable) || errors.Is(err, kerr.CoordinatorLoadInProgress) || errors.Is(err, kerr.NotCoordinator)))
		switch {
		case err == nil:
			return out, nil
		case !retry:
			return nil, fmt.Errorf("kafka: committed offsets of group %q topic %q: %w", group, topic, access{topic: topic, groupOp: "Describe", group: group}.classify(err))
		}
		wait := delay
		if errors.Is(err, kerr.UnstableOffsetCommit) {
			// A pending transactional commit (the previous owner's
			// last batch, being committed or aborted) usually ends
			// within a few hundred ms: poll it at a fixed short
			// interval, so the answer follows its end closely (a
			// doubling backoff answered up to 0.5 s late: every
			// partition moved in a join waited for it).
			wait = unstablePoll
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("kafka: committed offsets of group %q topic %q: %w", group, topic, ctx.Err())
		case <-time.After(wait):
		}
	}
}

// unstablePoll is how often CommittedOffsets asks again while a pending
// transactional offset commit makes the answer unstable: one small request
// to the group coordinator per partition owner that waits.
const unstablePoll = 25 * time.Millisecond

// committedOnce is one offset fetch of CommittedOffsets.
func (a *Admin) committedOnce(ctx context.Context, group, topic string) (map[int32]int64, error) {
	resps, err := a.adm.FetchOffsetsForTopics(kadm.RequireStable(ctx), group, topic)
	if errors.Is(err, kerr.GroupIDNotFound) {
		return map[int32]int64{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := make(map[int32]int64)
	for p, r := range resps[topic] {
		if errors.Is(r.Err, kerr.GroupIDNotFound) {
			continue
		}
		if r.Err != nil {
			return nil, r.Err
		}
		if r.At >= 0 {
			out[p] = r.At
		}
	}
	return out, nil
}

// coordinatorWait bounds how long CommittedOffsets waits for a group
// coordinator that is not available (yet).
const coordinatorWait = 30 * time.Second

// EndOffsets returns the high watermark of every partition of topic.
func (a *Admin) EndOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return listOffsets(ctx, topic, a.adm.ListEndOffsets)
}

// StableOffsets returns the last stable offset (LSO) of every partition of
// topic: the end of what a read_committed consumer can read now.
func (a *Admin) StableOffsets(ctx context.Context, topic string) (map[int32]int64, error) {
	return listOffsets(ctx, topic, a.adm.ListCommittedOffsets)
}

func listOffsets(ctx context.Context, topic string, list func(context.Context, ...string) (kadm.ListedOffsets, error)) (map[int32]int64, error) {
	lo, err := list(ctx, topic)
	if err != nil {
		return nil, fmt.Errorf("kafka: list offsets of topic %q: %w", topic, access{topic: topic}.classify(err))
	}
	ps, ok := lo[topic]
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
	}
	out := make(map[int32]int64, len(ps))
	for p, o := range ps {
		if o.Err != nil {
			if errors.Is(o.Err, kerr.UnknownTopicOrPartition) && p < 0 {
				return nil, fmt.Errorf("%w: %q", ErrTopicNotFound, topic)
			}
			return nil, fmt.Errorf("kafka: list offsets of topic %q partition %d: %w", topic, p, access{topic: topic}.classify(o.Err))
		}
		out[p] = o.Offset
	}
	return out, nil
}

// DropEmptyTopic deletes topic if every partition's end offset is 0 (no
// record, not even a transaction marker, was ever written) and reports
// whether it did.
func (a *Admin) DropEmptyTopic(ctx context.Context, topic string) (bool, error) {
	ends, err := a.EndOffsets(ctx, topic)
	if errors.Is(err, ErrTopicNotFound) {
		return true, nil // deleted meanwhile (another pipeline's failed start)
	}
	if err != nil {
		return false, err
	}
	for _, o := range ends {
		if o != 0 {
			return false, nil
		}
	}
	a.created.Delete(topic) // missing from now on, not propagating
	resp, err := a.adm.DeleteTopic(ctx, topic)
	if err == nil {
		err = resp.Err
	}
	if errors.Is(err, kerr.UnknownTopicOrPartition) {
		return true, nil
	}
	if err != nil {
		return false, fmt.Errorf("kafka: delete topic %q: %w", topic, access{topic: topic}.classify(err))
	}
	return true, nil
}

// MaxMessageBytes returns the topic's effective max.message.bytes: the
// largest record batch its brokers accept.
func (a *Admin) MaxMessageBytes(ctx context.Context, topic string) (int, error) {
	v, err := a.topicConfig(ctx, topic, "max.message.bytes")
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(v)
	if err != nil {
		return 0, fmt.Errorf("kafka: topic %q: max.message.bytes %q: %w", topic, v, err)
	}
	return n, nil
}

// DeleteRetention returns topic's delete.retention.ms: how long compaction
// keeps a tombstone; 0 when the broker does not report it.
func (a *Admin) DeleteRetention(ctx context.Context, topic string) (time.Duration, error) {
	v, err := a.topicConfig(ctx, topic, "delete.retention.ms")
	if err != nil || v == "" {
		return 0, err // "": not reported (0: unknown)
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("kafka: topic %q: delete.retention.ms %q: %w", topic, v, err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// CommitGroupOffsets commits offsets (partition → next offset to read) of
// topic for group, outside any consumer session. The group must have no
// member: a stopped static member (group.instance.id) stays one until its
// session timeout, so while the broker answers UNKNOWN_MEMBER_ID or
// REBALANCE_IN_PROGRESS it retries until ctx ends.
func (a *Admin) CommitGroupOffsets(ctx context.Context, group, topic string, offsets map[int32]int64) error {
	os := kadm.Offsets{}
	for p, o := range offsets {
		os.AddOffset(topic, p, o, -1)
	}
	for {
		resp, err := a.adm.CommitOffsets(ctx, group, os)
		if err == nil {
			err = resp.Error()
		}
		if err == nil {
			return nil
		}
		if !errors.Is(err, kerr.UnknownMemberID) && !errors.Is(err, kerr.RebalanceInProgress) && !errors.Is(err, kerr.IllegalGeneration) {
			err = access{topicOp: "Read", topic: topic, groupOp: "Read", group: group}.classify(err)
			return fmt.Errorf("kafka: commit offsets of group %q topic %q: %w", group, topic, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("kafka: commit offsets of group %q topic %q: the group still has members (stop every instance; a stopped static member leaves after its session timeout): %w", group, topic, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
}
