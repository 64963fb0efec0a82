package statereader

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/kv"
)

// ErrNoState is returned by OpenStateDir when the directory holds no state
// of the application, and by OpenChangelog when the changelog topic does
// not exist.
var ErrNoState = errors.New("statereader: no state found")

// OpenChangelog reads the changelog topic "<appID>-changelog" of the
// cluster at brokers: every partition, read_committed, up to its last
// stable offset at open. With AtBatch, one partition as of one batch.
func OpenChangelog(ctx context.Context, brokers []string, appID string, opts ...Option) (*Reader, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if err := o.at.check(); err != nil {
		return nil, err
	}
	topic := appID + "-changelog"
	cc := kafka.ClientConfig{Brokers: brokers, Extra: o.kafkaOpts}
	adm, err := cc.NewAdmin()
	if err != nil {
		return nil, fmt.Errorf("statereader: %w", err)
	}
	n, err := adm.Partitions(ctx, topic)
	adm.Close()
	if errors.Is(err, kafka.ErrTopicNotFound) {
		return nil, fmt.Errorf("%w: application %q has no changelog topic %q (wrong --app, or it never ran)", ErrNoState, appID, topic)
	}
	if err != nil {
		return nil, fmt.Errorf("statereader: %w", err)
	}
	if o.at != nil && int(o.at.partition) >= n {
		return nil, fmt.Errorf("statereader: AtBatch: partition %d of %s, which has %d partitions", o.at.partition, topic, n)
	}
	readers := make([]*kafka.PartitionReader, n)
	defer func() {
		for _, r := range readers {
			if r != nil {
				r.Close()
			}
		}
	}()
	var total int64
	for p := range readers {
		if o.at != nil && int32(p) != o.at.partition {
			continue
		}
		r, err := cc.NewPartitionReader(ctx, topic, int32(p), 0)
		if err != nil {
			return nil, fmt.Errorf("statereader: %w", err)
		}
		readers[p] = r
		total += r.End() - r.Position()
	}
	// Partitions are read concurrently (up to 4 at once), each into its
	// own map; progress is reported from this goroutine.
	raw := make(map[int32]map[string][]byte, n)
	maps := make([]map[string][]byte, n)
	errs := make([]error, n)
	var read atomic.Int64
	sem := make(chan struct{}, 4)
	var wg sync.WaitGroup
	for p, r := range readers {
		if r == nil {
			continue // not the AtBatch partition
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			var m map[string][]byte
			var err error
			if o.at != nil {
				m, err = readAtBatch(ctx, r, *o.at, func(n int) { read.Add(int64(n)) })
				if nr := (*BatchNotReadableError)(nil); errors.As(err, &nr) {
					errs[p] = err
					return
				}
			} else {
				m, err = r.ReadView(ctx, func(n int) { read.Add(int64(n)) })
			}
			if err != nil {
				errs[p] = fmt.Errorf("statereader: read %s partition %d: %w", topic, p, err)
				return
			}
			maps[p] = m
		}()
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for waiting := true; waiting; {
		select {
		case <-done:
			waiting = false
		case <-tick.C:
			if o.progress != nil {
				o.progress(read.Load(), total)
			}
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for p, m := range maps {
		if readers[p] != nil {
			raw[int32(p)] = m
		}
	}
	if o.progress != nil {
		o.progress(read.Load(), total)
	}
	source := "changelog topic " + topic
	if o.at != nil {
		source += fmt.Sprintf(" partition %d as of batch %d", o.at.partition, o.at.batch)
	}
	return newReader(appID, source, o, raw)
}

// OpenStateDir reads the local state of appID under stateDir (the
// application's kstate.Options.State.Dir: one RocksDB per partition in
// stateDir/<appID>/<partition>/rocksdb), opened read-only so the
// application may keep running. Only the partitions this instance holds
// locally are there.
func OpenStateDir(stateDir, appID string, opts ...Option) (*Reader, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	base := filepath.Join(stateDir, appID)
	if o.at != nil {
		return nil, errNoHistory("a state directory")
	}
	ents, err := os.ReadDir(base)
	if err != nil {
		return nil, fmt.Errorf("%w: application %q has no state directory %s: %w", ErrNoState, appID, base, err)
	}
	raw := map[int32]map[string][]byte{}
	for _, e := range ents {
		p, err := strconv.ParseInt(e.Name(), 10, 32)
		if err != nil || !e.IsDir() {
			continue
		}
		var backend kv.Backend
		var dir string
		for _, b := range []kv.Backend{kv.BackendRocksDB, kv.BackendPebble} {
			d := filepath.Join(base, e.Name(), b.Subdir())
			if _, err := os.Stat(d); err == nil {
				backend, dir = b, d
				break
			}
		}
		if dir == "" {
			continue
		}
		m, err := readStore(backend, dir)
		if err != nil {
			return nil, err
		}
		raw[int32(p)] = m
	}
	if len(raw) == 0 {
		return nil, fmt.Errorf("%w: %s holds no partition directory of application %q", ErrNoState, base, appID)
	}
	return newReader(appID, "state directory "+base, o, raw)
}

func readStore(backend kv.Backend, dir string) (map[string][]byte, error) {
	var st kv.Store
	var err error
	if backend == kv.BackendPebble {
		st, err = kv.OpenPebble(dir, kv.PebbleOptions{ReadOnly: true, BlockCacheSize: 8 << 20})
	} else {
		st, err = kv.OpenRocksDB(dir, kv.RocksOptions{ReadOnly: true, BlockCacheSize: 8 << 20})
	}
	if err != nil {
		return nil, fmt.Errorf("statereader: %w", err)
	}
	defer st.Close()
	it := st.NewIter(nil, []byte{0xff})
	defer it.Close()
	m := map[string][]byte{}
	for ok := it.First(); ok; ok = it.Next() {
		m[string(it.Key())] = append([]byte(nil), it.Value()...)
	}
	if err := it.Error(); err != nil {
		return nil, fmt.Errorf("statereader: read %s: %w", dir, err)
	}
	return m, nil
}

// FromEntries reads state from shard entries held in memory: for each
// partition, its shard keys and stored values (the changelog's record keys
// and values, format in package changelog), e.g. a dump, or a part of a
// shard read by a live query (kstate's App.Query). A key's last value wins;
// include the variable registry entries ("var/<name>" meta keys) of the
// variables to read.
func FromEntries(appID string, partitions map[int32]map[string][]byte, opts ...Option) (*Reader, error) {
	var o options
	for _, opt := range opts {
		opt(&o)
	}
	if o.at != nil {
		return nil, errNoHistory("FromEntries")
	}
	return newReader(appID, "entries", o, partitions)
}
