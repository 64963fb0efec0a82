package kstate

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
	"github.com/kstate/kstate/statereader"
)

// Live queries: the committed state of one key, answered from the shard
// of the instance that owns it (Kafka Streams' interactive queries).

var (
	// ErrNotOwner: App.Query asked for a key whose partition this instance
	// does not own, or has not restored yet. App.KeyOwner (and the /state
	// endpoint's 421 answer) names the owner: ask it.
	ErrNotOwner = errors.New("kstate: key not owned by this instance")
	// ErrNotRunning: App.Query or App.KeyOwner before Run joined the
	// group (or after it returned).
	ErrNotRunning = errors.New("kstate: not running")
	// ErrUnknownVariable: App.Query named a state variable the key's
	// partition has never declared.
	ErrUnknownVariable = errors.New("kstate: unknown state variable")
	// ErrKeyElsewhere: App.Query found no state for a key on its partition
	// (murmur2 of the key) nor on this instance's other partitions, while
	// records whose key does not hash to the partition they were read from
	// were processed (Topology.OnKeyPartitionMismatch = KeyPartitionAllow):
	// the key's state may be on a partition another instance owns, so an
	// empty answer could be wrong. The /state endpoint answers 409.
	ErrKeyElsewhere = errors.New("kstate: the key's state may be on another partition")
)

// QueryResult is the answer of App.Query.
type QueryResult struct {
	Variable  string `json:"variable"`
	Kind      string `json:"kind"` // "value", "list", "map", "packed list" or "packed map"
	Partition int32  `json:"partition"`
	// Entries are the variable's committed rows under the key, decoded as
	// package statereader decodes them (the codec's recorded schema): one
	// for a ValueState, a ListState's elements in order, a MapState's
	// entries by map key; none when the key has no (unexpired) state.
	Entries []statereader.Entry `json:"entries"`
}

// KeyOwner says where a grouping key's state lives.
type KeyOwner struct {
	// Partition is the key's input partition (murmur2 of the key bytes).
	Partition int32 `json:"partition"`
	// Local: this instance owns the partition and has restored it, so
	// Query answers for the key here.
	Local bool `json:"local"`
	// Assigned: a member of the group is assigned the partition; false
	// while the group rebalances, has no member, or left the partition
	// unowned (its owner stopped without leaving the group, until its
	// session times out).
	Assigned bool `json:"assigned"`
	// InstanceID is the owning group member's instance id: the owner's
	// Options.InstanceID, with "-p<i>" for its pipeline i > 0.
	InstanceID string `json:"instance_id,omitempty"`
	// Process is the owner's Options.InstanceID (the application
	// instance); empty when the group view is unknown (see URL).
	Process string `json:"process,omitempty"`
	// URL is the owner's Options.Group.AdvertisedURL, from the group view
	// this instance received with its last assignment: "" when the owner
	// advertises none, or when the group's leader runs an older kstate
	// release that sends no view. Then the owner is read from the group
	// coordinator instead, with ClientID and Host (the client's id and
	// the address the coordinator saw it connect from).
	URL      string `json:"url"`
	ClientID string `json:"client_id,omitempty"`
	Host     string `json:"host,omitempty"`
	// StandbyURLs are the advertised URLs of the instances that keep a
	// standby (or warm-up) copy of the partition's state
	// (Options.Group.Standbys): the instances it fails over to. They do
	// not answer live queries for it.
	StandbyURLs []string `json:"standby_urls,omitempty"`
}

// Query returns the committed state of variable under key, from this
// instance's local shard: state as of the last committed micro-batch,
// never a batch in progress. It is safe to call concurrently with Run,
// while Run runs; values whose TTL expired are left out. Keys of
// partitions this instance does not own (or is still restoring) fail with
// ErrNotOwner: KeyOwner tells which instance to ask.
func (a *App[K, I, O]) Query(ctx context.Context, variable string, key K) (QueryResult, error) {
	kb, err := a.cfg.KeySerde.Serialize(key)
	if err != nil {
		return QueryResult{}, fmt.Errorf("kstate: Query(%q): encode key: %w", variable, err)
	}
	return a.queryBytes(ctx, variable, kb)
}

func (a *App[K, I, O]) coordinator() *pipelineSet {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.mu.coord
}

func (a *App[K, I, O]) queryBytes(_ context.Context, variable string, key []byte) (QueryResult, error) {
	res := QueryResult{Variable: variable, Entries: []statereader.Entry{}}
	fail := func(err error) (QueryResult, error) {
		return res, fmt.Errorf("kstate: Query(%q, key %q): %w", variable, key, err)
	}
	c := a.coordinator()
	if c == nil || a.State() == Stopped || a.State() == Failed {
		return fail(ErrNotRunning)
	}
	p, err := c.KeyPartition(key)
	if err != nil {
		return fail(ErrNotRunning)
	}
	res.Partition = p
	res, err = a.queryPartition(c, p, variable, key)
	if err == nil && len(res.Entries) > 0 {
		return res, nil
	}
	if err != nil && !errors.Is(err, ErrNotOwner) && !errors.Is(err, ErrUnknownVariable) {
		return fail(err)
	}
	// Not on the key's partition (or not here): records whose key does not
	// hash to their partition (a producer without murmur2, e.g. kcat's
	// default) keep their state on the partition they arrived on. Look on
	// this instance's other partitions: one bounded seek each, on a miss only.
	snap := c.Snapshot()
	for _, q := range snap.Assigned {
		if q == p {
			continue
		}
		r, qerr := a.queryPartition(c, q, variable, key)
		if qerr == nil && len(r.Entries) > 0 {
			return r, nil
		}
		if qerr == nil && errors.Is(err, ErrUnknownVariable) {
			// p has not run a batch yet; the variable exists: empty on p.
			err, res.Kind = nil, r.Kind
		}
	}
	if err != nil {
		// Not owned here (the owner of p answers, or says it is elsewhere),
		// or the variable is unknown on p and nowhere else holds the key.
		res.Partition = p
		return fail(err)
	}
	if n := snap.Total.KeyPartitionMismatches; n > 0 && len(snap.Assigned) < a.partitionCount(c) {
		// An empty answer could be wrong: the key may live on a partition
		// another instance owns.
		res.Partition = p
		return fail(fmt.Errorf("%w: %d input records were read from a partition their key does not hash to, "+
			"and partition %d has no state for this key: it may be on a partition another instance owns "+
			"(produce with Kafka's default partitioner, murmur2; kcat: -X topic.partitioner=murmur2_random)", ErrKeyElsewhere, n, p))
	}
	return res, nil
}

// partitionCount is the input's partition count as the pipelines know it
// (the key partitioner's modulus).
func (a *App[K, I, O]) partitionCount(c *pipelineSet) int {
	n := 0
	for _, co := range c.Coords {
		n = max(n, co.Partitions())
	}
	return n
}

// queryPartition reads variable under key from partition p's committed
// state. ErrNotOwner: p is not here (or was revoked while read);
// ErrUnknownVariable: p never declared variable.
func (a *App[K, I, O]) queryPartition(c *pipelineSet, p int32, variable string, key []byte) (QueryResult, error) {
	res := QueryResult{Variable: variable, Partition: p, Entries: []statereader.Entry{}}
	read := func(lower, upper []byte, each func(k, v []byte) bool) error {
		return c.ReadCommitted(p, lower, upper, each)
	}
	entries, info, found, err := shard.ReadVarKey(read, variable, key)
	if err != nil {
		// Closed: revoked while we read.
		if errors.Is(err, engine.ErrNotOwned) || errors.Is(err, state.ErrClosed) {
			if found {
				return res, fmt.Errorf("%w (partition %d, revoked)", ErrNotOwner, p)
			}
			return res, fmt.Errorf("%w (partition %d)", ErrNotOwner, p)
		}
		return res, err
	}
	if !found {
		return res, fmt.Errorf("%w: partition %d has no variable %q", ErrUnknownVariable, p, variable)
	}
	res.Kind = info.Kind
	r, err := statereader.FromEntries(a.cfg.ApplicationID, map[int32]map[string][]byte{p: entries})
	if err != nil {
		return res, err
	}
	got, err := r.Read(variable, statereader.Query{Key: key})
	if err != nil {
		return res, err
	}
	now := a.cfg.Clock().UnixMilli()
	for _, e := range got {
		if e.ExpiryMs != nil && *e.ExpiryMs <= now {
			continue // expired: the processor would not see it either
		}
		res.Entries = append(res.Entries, e)
	}
	return res, nil
}

// KeyOwner returns which partition key belongs to and which member of the
// group owns that partition, with its advertised URL: as the group view
// of this instance's last assignment says (no round trip), or, in a group
// whose leader runs an older release that sends no view, as the group
// coordinator says now.
func (a *App[K, I, O]) KeyOwner(ctx context.Context, key K) (KeyOwner, error) {
	kb, err := a.cfg.KeySerde.Serialize(key)
	if err != nil {
		return KeyOwner{}, fmt.Errorf("kstate: KeyOwner: encode key: %w", err)
	}
	return a.keyOwner(ctx, kb)
}

func (a *App[K, I, O]) keyOwner(ctx context.Context, key []byte) (KeyOwner, error) {
	c := a.coordinator()
	a.mu.Lock()
	adm := a.mu.admin
	a.mu.Unlock()
	if c == nil || a.State() == Stopped || a.State() == Failed {
		return KeyOwner{}, fmt.Errorf("kstate: KeyOwner: %w", ErrNotRunning)
	}
	p, err := c.KeyPartition(key)
	if err != nil {
		return KeyOwner{}, fmt.Errorf("kstate: KeyOwner: %w", ErrNotRunning)
	}
	o := KeyOwner{Partition: p}
	o.Local = c.Owns(p)
	if v, _, ok := c.GroupView(); ok {
		if m, ok := v.Owner(p); ok {
			o.Assigned, o.InstanceID, o.Process, o.URL = true, m.InstanceID, m.Process, m.Addr
		}
		for _, m := range v.Members {
			if m.Addr != "" && (slices.Contains(m.Standby, p) || slices.Contains(m.Warmup, p)) && !slices.Contains(o.StandbyURLs, m.Addr) {
				o.StandbyURLs = append(o.StandbyURLs, m.Addr)
			}
		}
		return o, nil
	}
	if adm == nil {
		return o, fmt.Errorf("kstate: KeyOwner: %w", ErrNotRunning)
	}
	owners, err := adm.PartitionOwners(ctx, a.cfg.ApplicationID, a.cfg.inputTopics()[0])
	if err != nil {
		return o, fmt.Errorf("kstate: KeyOwner: %w", err)
	}
	if m, ok := owners[p]; ok {
		o.Assigned, o.InstanceID, o.ClientID, o.Host = true, m.InstanceID, m.ClientID, m.Host
	}
	return o, nil
}

// QueryHandler returns an http.Handler serving live state queries, and
// nothing else:
//
//	GET /state/{variable}/{key}
//	      a live query (see Query): 200 QueryResult as JSON; 409 when the
//	      key's state may be on another instance's partition
//	      (ErrKeyElsewhere); 404 for an unknown variable; 503 when not
//	      running. The key is the record key's bytes, URL path-escaped
//	      (?key_base64=1: the key segment is base64url). Every answer
//	      names the instance that gave it in the Kstate-Answered-By
//	      header (its Options.InstanceID).
//
// A key another instance owns is forwarded to the owner when the group
// view names the owner's URL (Options.Group.AdvertisedURL, see KeyOwner):
// the same method, path and query, to the owner's URL, with the caller's
// headers (its credentials too: Authorization, cookies) but the
// hop-by-hop ones, and a Kstate-Forwarded-By header naming this instance;
// the owner's answer is returned as it is (status, headers, body), its
// Kstate-Answered-By naming the owner. One hop only: a forwarded request
// for a key the receiver does not own answers 421 and is never forwarded
// again. An owner that does not answer within 10 seconds gives 504 (502
// when it cannot be reached), with the KeyOwner. Without forwarding —
// the owner advertises no URL, no member owns the partition now, the
// request was forwarded already, or the caller asked ?forward=0 — the
// answer is 421 Misdirected Request with the KeyOwner (URL "" when the
// owner advertises none) for the caller to ask the owner itself.
//
// It answers with any key's committed state to whoever asks: it has no
// authentication of its own, and neither Handler nor Config.HTTPAddr
// serves it. Mount it deliberately, behind your own authentication and
// TLS (docs/OPERATIONS.md, "Security"), where you like: it routes on the
// full path (mount it at the root, or strip a prefix with
// http.StripPrefix), at the same path on every instance (a forwarded
// query keeps its path). Forwarding passes the caller's credentials to
// the URL a group member advertises: whoever may join the application's
// consumer group (Kafka's ACLs) receives them; send ?forward=0 where
// that is not wanted. Each call returns a new handler.
func (a *App[K, I, O]) QueryHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state/{variable}/{key...}", a.serveQuery)
	return mux
}

// queryFailure is the JSON body of a /state error answer.
type queryFailure struct {
	Error string    `json:"error"`
	Owner *KeyOwner `json:"owner,omitempty"`
}

// serveQuery is GET /state/{variable}/{key} of QueryHandler.
func (a *App[K, I, O]) serveQuery(w http.ResponseWriter, r *http.Request) {
	reply := func(code int, v any) {
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set(headerAnsweredBy, a.cfg.InstanceID)
		writeJSON(w, code, v)
	}
	key := []byte(r.PathValue("key"))
	if r.URL.Query().Get("key_base64") != "" {
		b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(string(key), "="))
		if err != nil {
			reply(http.StatusBadRequest, queryFailure{Error: "key_base64: " + err.Error()})
			return
		}
		key = b
	}
	res, err := a.queryBytes(r.Context(), r.PathValue("variable"), key)
	switch {
	case err == nil:
		reply(http.StatusOK, res)
	case errors.Is(err, ErrNotOwner):
		ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
		defer cancel()
		f := queryFailure{Error: err.Error()}
		o, oerr := a.keyOwner(ctx, key)
		if oerr != nil {
			reply(http.StatusMisdirectedRequest, f)
			return
		}
		f.Owner = &o
		why := a.notForwarded(r, o)
		if why == "" {
			a.forward(w, r, o)
			return
		}
		f.Error += "; " + why
		reply(http.StatusMisdirectedRequest, f)
	case errors.Is(err, ErrKeyElsewhere):
		reply(http.StatusConflict, queryFailure{Error: err.Error()})
	case errors.Is(err, ErrUnknownVariable):
		reply(http.StatusNotFound, queryFailure{Error: err.Error()})
	case errors.Is(err, ErrNotRunning):
		reply(http.StatusServiceUnavailable, queryFailure{Error: err.Error()})
	default:
		reply(http.StatusInternalServerError, queryFailure{Error: err.Error()})
	}
}
