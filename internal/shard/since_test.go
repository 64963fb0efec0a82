package shard_test

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// TestChangelogSince: a shard records, with its changelog offset, a time at
// or before which every changelog record after that offset was written
// (the engine restores a shard in full when it is older than the
// changelog's delete.retention.ms): the Begin of the last batch the store
// holds, in every commit mode, also after a crash that loses the
// write-behind layer (the time goes with the offset the store kept); the
// timestamp of the last record a restore applied; a raise once a restore
// reached the changelog's end; nothing after a wipe.
func TestChangelogSince(t *testing.T) {
	for _, mode := range []struct {
		name       string
		wb         int64
		background bool
		disk       bool // the default backend (kv.OrderedWriter: RocksDB), not memory
	}{{"write-through", 0, false, false}, {"write-behind", 1 << 20, false, false}, {"background flushes", 1, true, false},
		{"write-behind on disk", 1 << 20, false, true}, {"background flushes on disk", 1, true, true}} {
		t.Run(mode.name, func(t *testing.T) {
			var clock int64
			var store kv.Store = kv.NewMemory()
			if mode.disk {
				st, err := kv.OpenBackend(kv.DefaultBackend(), t.TempDir(), nil, false)
				noErr(t, err)
				defer st.Close()
				store = st
			}
			// Each open shard writes through its own process: a crash ends
			// it, and with it a background flush still running (a real
			// crash kills the goroutine; here it could land after the
			// next shard's wipe).
			var proc *process
			open := func() *shard.Shard {
				proc = newProcess(store)
				s, err := shard.OpenShard(shard.ShardOptions{Backend: proc.store(), WriteBehindBytes: mode.wb,
					Now: func() time.Time { return time.UnixMilli(clock) }})
				noErr(t, err)
				s.SetBackgroundFlush(mode.background)
				return s
			}
			var l log
			sinceAt := map[int64]int64{0: 0} // changelog offset → the time that goes with it
			put := func(s *shard.Shard, ms int64) {
				clock = ms
				commit(t, s, &l, ms, func() {
					s.SetCurrentKey([]byte("k"))
					noErr(t, s.PutMeta("engine/x", []byte{byte(ms / 1000)}))
				})
				sinceAt[s.ChangelogOffset()] = ms
				if got := s.ChangelogSince(); got != ms {
					t.Fatalf("after a batch begun at %d: ChangelogSince %d", ms, got)
				}
			}

			s := open()
			if got := s.ChangelogSince(); got != 0 {
				t.Fatalf("new shard: ChangelogSince %d, want 0 (unknown)", got)
			}
			put(s, 1000)
			noErr(t, s.Flush())
			put(s, 2000)
			put(s, 3000)
			clock = 4000
			// A crash: s is dropped without Close. The store's offset and
			// time go together, whatever the layer lost.
			proc.crash()
			s = open()
			off, since := s.ChangelogOffset(), s.ChangelogSince()
			if want, ok := sinceAt[off]; !ok || since != want {
				t.Fatalf("reopened after a crash at offset %d: ChangelogSince %d, want %d (the batch that ended there)", off, since, want)
			}

			// A restore of the rest: the last record's timestamp.
			recs := append([]changelog.Record(nil), l.recs[off:]...)
			for i := range recs {
				recs[i].TimestampMs = 5000 + int64(i)
			}
			if len(recs) > 0 {
				noErr(t, s.ApplyChangelog(recs, l.next()))
				if got, want := s.ChangelogSince(), recs[len(recs)-1].TimestampMs; got != want {
					t.Fatalf("after a restore: ChangelogSince %d, want the last record's timestamp %d", got, want)
				}
			}
			before := s.ChangelogSince()
			noErr(t, s.ApplyChangelog(nil, l.next()+2)) // markers only
			last := l.recs[len(l.recs)-1]
			last.TimestampMs = 0
			noErr(t, s.ApplyChangelog([]changelog.Record{last}, l.next()+3)) // no timestamp
			if got := s.ChangelogSince(); got != before {
				t.Fatalf("records without timestamps: ChangelogSince %d, want %d kept", got, before)
			}
			noErr(t, s.RaiseChangelogSince(before-1))
			noErr(t, s.RaiseChangelogSince(9000))
			if got := s.ChangelogSince(); got != 9000 {
				t.Fatalf("raised to 9000: ChangelogSince %d", got)
			}
			noErr(t, s.Close())
			s = open()
			if got := s.ChangelogSince(); got != 9000 {
				t.Fatalf("reopened: ChangelogSince %d, want 9000", got)
			}
			noErr(t, s.Wipe())
			if got := s.ChangelogSince(); got != 0 {
				t.Fatalf("wiped: ChangelogSince %d, want 0", got)
			}
			noErr(t, s.Close())
			s = open()
			defer s.Close()
			if got := s.ChangelogSince(); got != 0 {
				t.Fatalf("reopened after the wipe: ChangelogSince %d, want 0", got)
			}
		})
	}
}

// process is the writes of one process to a store it shares with the
// processes after it: once crashed, its writes fail without reaching the
// store, and a write in flight at the crash is whole or absent (crash
// waits for it), as with a process killed.
type process struct {
	st      kv.Store
	mu      sync.RWMutex
	crashed bool
}

func newProcess(st kv.Store) *process { return &process{st: st} }

var errCrashed = errors.New("the process crashed")

func (p *process) crash() {
	p.mu.Lock()
	p.crashed = true
	p.mu.Unlock()
}

// store is the store as the process sees it: a kv.OrderedWriter if st is.
func (p *process) store() kv.Store {
	if _, ok := p.st.(kv.OrderedWriter); ok {
		return processOrdered{processStore{p}}
	}
	return processStore{p}
}

type processStore struct{ *process }

func (p processStore) Get(key []byte) ([]byte, bool, error)    { return p.st.Get(key) }
func (p processStore) NewIter(lower, upper []byte) kv.Iterator { return p.st.NewIter(lower, upper) }
func (p processStore) Checkpoint(dir string) error             { return p.st.Checkpoint(dir) }
func (p processStore) Estimate() (kv.Estimate, error)          { return p.st.Estimate() }
func (p processStore) Close() error                            { return nil }

// write runs fn, a write to the store, unless the process crashed; a
// crash waits for it.
func (p *process) write(fn func() error) error {
	p.mu.RLock()
	defer p.mu.RUnlock()
	if p.crashed {
		return errCrashed
	}
	return fn()
}

func (p processStore) Write(b *kv.Batch, o kv.WriteOptions) error {
	return p.write(func() error { return p.st.Write(b, o) })
}

type processOrdered struct{ processStore }

func (p processOrdered) WriteOrdered(walk func(add func(key, value []byte, deleted bool)), o kv.WriteOptions) error {
	return p.write(func() error { return p.st.(kv.OrderedWriter).WriteOrdered(walk, o) })
}
