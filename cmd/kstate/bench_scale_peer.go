package main

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kstate/kstate"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kafkabroker"
)

// `kstate bench scale --peer kstreams`: the same four events with Kafka
// Streams 4.1.1 instances (internal/tools/benchpeers/kstreams-scale, a
// Maven project built into the cache) instead of kstate's workers. The
// peer prints status lines in the shape of the worker's (its active and
// standby tasks, its restores), but its windows end by the output's flow,
// not by kstate's Status.

// peerKStreams is the one peer --peer knows.
const peerKStreams = "kstreams"

// peerSource is the Maven project of the Kafka Streams peer, relative to
// the repository's root.
const peerSource = "internal/tools/benchpeers/kstreams-scale"

// kstreamsMinProbing is Kafka Streams' lower bound on
// probing.rebalance.interval.ms (StreamsConfig validates at least 60 s).
const kstreamsMinProbing = time.Minute

// kstate's defaults of the options the peer is matched to (config.go,
// internal/kafka): Group.AcceptableLag, Group.ProbingInterval,
// Kafka.SessionTimeout, Kafka.TransactionTimeout.
const (
	kstateDefaultAcceptableLag = 10_000
	kstateDefaultProbing       = time.Minute
)

// peerSettings are the Kafka Streams settings of every peer instance,
// matched to the kstate options of --set.
type peerSettings struct {
	SessionTimeout time.Duration `json:"session_timeout_ns"`
	TxnTimeout     time.Duration `json:"transaction_timeout_ns"`
	AcceptableLag  int64         `json:"acceptable_recovery_lag"`
	Probing        time.Duration `json:"probing_rebalance_interval_ns"`
	Commit         time.Duration `json:"commit_interval_ns"`
	Leave          bool          `json:"leave_group_on_close"`
	// Notes say where a setting could not be matched.
	Notes []string `json:"notes,omitempty"`
}

// peerMappable are the --set paths the peer has a Kafka Streams setting
// for (Group.Standbys is --standbys).
var peerMappable = []string{"Group.Standbys", "Group.AcceptableLag", "Group.ProbingInterval", "Kafka.SessionTimeout", "Kafka.TransactionTimeout", "Kafka.LeaveGroupOnShutdown"}

// peerConfig maps the instances' kstate options to Kafka Streams settings.
// A --set it has no setting for is an error naming it.
func (o scaleOptions) peerConfig() (peerSettings, error) {
	var opts kstate.Options
	for _, s := range o.Sets {
		path, _, _ := strings.Cut(s, "=")
		if !slices.Contains(peerMappable, strings.TrimSpace(path)) {
			return peerSettings{}, fmt.Errorf("bench scale: --peer %s: --set %s has no Kafka Streams setting here (these do: %s)",
				o.Peer, s, strings.Join(peerMappable, ", "))
		}
		if err := setOption(&opts, s); err != nil {
			return peerSettings{}, fmt.Errorf("bench scale: %w", err)
		}
	}
	ps := peerSettings{SessionTimeout: opts.Kafka.SessionTimeout, TxnTimeout: opts.Kafka.TransactionTimeout, AcceptableLag: opts.Group.AcceptableLag,
		Probing: opts.Group.ProbingInterval, Commit: o.PeerCommit, Leave: o.Leave || opts.Kafka.LeaveGroupOnShutdown}
	if ps.SessionTimeout <= 0 {
		ps.SessionTimeout = kafka.DefaultSessionTimeout
	}
	if ps.TxnTimeout <= 0 {
		ps.TxnTimeout = kafka.DefaultTransactionTimeout
	}
	if ps.AcceptableLag <= 0 {
		ps.AcceptableLag = kstateDefaultAcceptableLag
	}
	if ps.Probing <= 0 {
		ps.Probing = kstateDefaultProbing
	}
	if ps.Probing < kstreamsMinProbing {
		ps.Notes = append(ps.Notes, fmt.Sprintf("probing.rebalance.interval.ms %d: Kafka Streams' minimum (Group.ProbingInterval %v asked)",
			kstreamsMinProbing.Milliseconds(), ps.Probing))
		ps.Probing = kstreamsMinProbing
	}
	return ps, nil
}

// peerCommand returns the command line of the peer instance in.
func (r *scaleRun) peerCommand(in *instance, standbys int) (string, []string) {
	ps := r.rep.Peer.Settings
	args := slices.Clone(r.o.PeerJavaOpts)
	args = append(args, "-jar", r.rep.Peer.Jar,
		"--brokers="+strings.Join(r.o.Brokers, ","), "--app-id="+r.appID, "--in="+r.in, "--out="+r.out,
		"--state-dir="+in.dir, "--instance="+in.name, "--state-bytes="+strconv.Itoa(r.o.StateBytes),
		"--standbys="+strconv.Itoa(standbys),
		"--session-timeout-ms="+strconv.FormatInt(ps.SessionTimeout.Milliseconds(), 10),
		"--acceptable-lag="+strconv.FormatInt(ps.AcceptableLag, 10),
		"--probing-ms="+strconv.FormatInt(ps.Probing.Milliseconds(), 10),
		"--commit-ms="+strconv.FormatInt(ps.Commit.Milliseconds(), 10),
		"--leave="+strconv.FormatBool(ps.Leave),
		"--X.producer.transaction.timeout.ms="+strconv.FormatInt(ps.TxnTimeout.Milliseconds(), 10))
	return r.o.PeerJava, args
}

// changelogTopic is the instances' changelog topic: kstate's, or Kafka
// Streams' of the peer's store "v" (<application.id>-<store>-changelog).
func (r *scaleRun) changelogTopic() string {
	if r.o.Peer == peerKStreams {
		return r.appID + "-v-changelog"
	}
	return r.appID + "-changelog"
}

// preparePeer validates the peer's settings and builds (or finds) its jar.
func (r *scaleRun) preparePeer(ctx context.Context) error {
	ps, err := r.o.peerConfig()
	if err != nil {
		return err
	}
	r.rep.Peer.Name, r.rep.Peer.Settings = r.o.Peer, ps
	for _, n := range ps.Notes {
		r.logf("peer %s: %s", r.o.Peer, n)
	}
	jar := r.o.PeerJar
	if jar == "" {
		if jar, err = buildPeerJar(ctx, r.o.Peer, r.logf); err != nil {
			return err
		}
	}
	if _, err := os.Stat(jar); err != nil {
		return fmt.Errorf("bench scale: --peer-jar: %w", err)
	}
	r.rep.Peer.Jar = jar
	return nil
}

// buildPeerJar builds the peer's Maven project (found from the working
// directory up) into the cache, once per version of its sources, and
// returns the jar's path.
func buildPeerJar(ctx context.Context, peer string, logf func(string, ...any)) (string, error) {
	src, err := findPeerSource()
	if err != nil {
		return "", err
	}
	sum, err := treeSum(src)
	if err != nil {
		return "", err
	}
	cache, err := kafkabroker.CacheDir()
	if err != nil {
		return "", err
	}
	build := filepath.Join(cache, "kstreams-scale", sum)
	jar := filepath.Join(build, "kstreams-scale.jar")
	if _, err := os.Stat(jar); err == nil {
		return jar, nil
	}
	logf("peer %s: building %s (mvn -q -B package, ~1 min the first time) into %s", peer, src, build)
	cmd := exec.CommandContext(ctx, "mvn", "-q", "-B", "package", "-DbuildDir="+build)
	cmd.Dir = src
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("bench scale: --peer %s: mvn package in %s: %w\n%s", peer, src, err, out)
	}
	if _, err := os.Stat(jar); err != nil {
		return "", fmt.Errorf("bench scale: --peer %s: mvn built no %s: %w", peer, jar, err)
	}
	return jar, nil
}

// findPeerSource finds peerSource from the working directory up.
func findPeerSource() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		p := filepath.Join(dir, peerSource)
		if _, err := os.Stat(filepath.Join(p, "pom.xml")); err == nil {
			return p, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", fmt.Errorf("bench scale: no %s above the working directory: run from the repository, or give --peer-jar", peerSource)
		}
		dir = parent
	}
}

// treeSum hashes the files under dir (but target/) in path order.
func treeSum(dir string) (string, error) {
	h := sha256.New()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == "target" {
			return filepath.SkipDir
		}
		if d.IsDir() {
			return nil
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		fmt.Fprintf(h, "%s %d\n", rel, len(b))
		h.Write(b)
		return nil
	})
	if err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil))[:16], nil
}

// flowSettled reports whether a peer's event window, the event at at, may
// end at now by the output's flow: every partition output since the event,
// and over the last settle (all of it after each partition's first output
// since the event) no partition's outputs paused longer than stopGap, up
// to now.
func flowSettled(arrivals map[int32][]time.Time, partitions int, at, now time.Time, settle, stopGap time.Duration) bool {
	from := now.Add(-settle)
	if from.Before(at) {
		return false
	}
	for p := range partitions {
		first, last := time.Time{}, time.Time{}
		for _, a := range arrivals[int32(p)] {
			if !a.After(at) {
				continue
			}
			if a.After(now) {
				break
			}
			if first.IsZero() {
				first = a
			}
			if !last.IsZero() && a.After(from) && a.Sub(last) > stopGap {
				return false
			}
			last = a
		}
		if first.IsZero() || first.After(from) || now.Sub(last) > stopGap {
			return false
		}
	}
	return true
}

// peerMoving reports whether the live peer instances hold more standby
// tasks than num.standby.replicas asks for: Kafka Streams' warm-up
// replicas are extra standby tasks, moved at a later probing rebalance.
func (r *scaleRun) peerMoving(standbys int) bool {
	n := 0
	for _, in := range r.live {
		n += len(peerStatusOf(in).KStreams.Standby)
	}
	return n > r.o.Partitions*min(standbys, max(len(r.live)-1, 0))
}

// peerStatus is the part of a peer's status line that kstate.Status does
// not have.
type peerStatus struct {
	KStreams struct {
		Standby    []int32 `json:"standby"`
		Rebalances int     `json:"rebalances"`
	} `json:"kstreams"`
}

func peerStatusOf(in *instance) peerStatus {
	var st peerStatus
	if raw := in.rawStatus(); raw != nil {
		_ = json.Unmarshal(raw, &st)
	}
	return st
}

// waitFlow is waitSettled for a peer: the window lasts at least
// --min-window and ends once flowSettled holds, the joined instance (if
// any) has an active task, and no warm-up waits to move (peerMoving); it
// returns errNotSettled at --max-window.
func (r *scaleRun) waitFlow(ctx context.Context, at time.Time, joined *instance) error {
	standbys := 0
	if len(r.live) > 0 {
		standbys = r.live[0].standbys
	}
	for {
		if err := r.failed(); err != nil {
			return err
		}
		now := time.Now()
		r.col.mu.Lock()
		ok := flowSettled(r.col.mu.arrivals, r.o.Partitions, at, now, r.o.Settle, r.o.FlowGap)
		r.col.mu.Unlock()
		if ok && joined != nil {
			ok = len(joined.status().Partitions) > 0
		}
		r.collectPeerStandby()
		if ok && r.peerMoving(standbys) {
			ok = false
		}
		if ok && now.Sub(at) >= r.o.MinWindow {
			return nil
		}
		if now.Sub(at) >= r.o.MaxWindow {
			return errNotSettled
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// collectPeerStandby records the standby tasks the live peer instances
// report during an event's window.
func (r *scaleRun) collectPeerStandby() {
	if r.peerStandby == nil {
		return
	}
	for _, in := range r.live {
		for _, p := range peerStatusOf(in).KStreams.Standby {
			if r.peerStandby[in.name] == nil {
				r.peerStandby[in.name] = map[int32]bool{}
			}
			r.peerStandby[in.name][p] = true
		}
	}
}

// peerRebalances sums the REBALANCING transitions the live peer instances
// reported.
func (r *scaleRun) peerRebalances() map[string]int {
	m := map[string]int{}
	for _, in := range r.live {
		m[in.name] = peerStatusOf(in).KStreams.Rebalances
	}
	return m
}

// peerEventStats fills what kstate's group view and status give for its
// own instances: the standby tasks at the end of the window, the most
// rebalances an instance went through in it and, for a join, the warm-ups:
// the moved partitions whose new owner held them as standby tasks in the
// window first (Kafka Streams' warm-up replicas are standby tasks).
func (r *scaleRun) peerEventStats(ev *scaleEvent, before map[string]int) {
	if ev.Kind == "join" {
		for i := range ev.Gaps {
			g := &ev.Gaps[i]
			if g.Moved && r.peerStandby[g.To][g.Partition] {
				g.Warmed = true
				ev.Warmed = append(ev.Warmed, g.Partition)
			}
		}
	}
	ev.Standby, ev.Rebalances = 0, 0
	for _, in := range r.live {
		st := peerStatusOf(in)
		ev.Standby += len(st.KStreams.Standby)
		ev.Rebalances = max(ev.Rebalances, st.KStreams.Rebalances-before[in.name])
	}
}

func (o *scaleOptions) validatePeer() error {
	switch o.Peer {
	case "":
		return nil
	case peerKStreams:
	default:
		return fmt.Errorf("bench scale: --peer %q: want %q (or none: kstate)", o.Peer, peerKStreams)
	}
	if o.FlowGap <= 0 || o.PeerCommit <= 0 {
		return errors.New("bench scale: --flow-gap and --peer-commit must be positive")
	}
	_, err := o.peerConfig()
	return err
}
