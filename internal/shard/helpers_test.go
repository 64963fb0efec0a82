package shard_test

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
)

// noClose keeps a store open across Shard.Close, so a test can reopen a
// shard on the same in-memory "disk".
type noClose struct{ kv.Store }

func (noClose) Close() error { return nil }

// multiGetter gives a store kv.MultiGetter by reading each key with Get,
// and fails the test when the keys are not in strictly increasing order.
type multiGetter struct {
	kv.Store
	t testing.TB
}

func (m multiGetter) GetSorted(keys [][]byte, limit int, fn func(i int, value []byte, ok bool)) error {
	for i, k := range keys {
		if i > 0 && bytes.Compare(keys[i-1], k) >= 0 {
			m.t.Errorf("GetSorted: key %d %x after %x", i, k, keys[i-1])
		}
		v, ok, err := m.Get(k)
		if err != nil {
			return err
		}
		if len(v) > limit {
			continue
		}
		limit -= len(v)
		fn(i, v, ok)
	}
	return nil
}

func openMem(t testing.TB, allowTTL bool) *shard.Shard {
	t.Helper()
	s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), AllowTTL: allowTTL})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// declare runs fn inside the declaration window.
func declare(t testing.TB, s *shard.Shard, fn func()) {
	t.Helper()
	s.SetDeclaring(true)
	defer s.SetDeclaring(false)
	fn()
}

func must[T any](t testing.TB) func(T, error) T {
	return func(v T, err error) T {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
}

func noErr(t testing.TB, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// log is a fake changelog: committed batches' records with offsets.
type log struct{ recs []changelog.Record }

func (l *log) next() int64 { return int64(len(l.recs)) }

func (l *log) append(recs []changelog.Record) {
	for _, r := range recs {
		r.Offset = l.next()
		l.recs = append(l.recs, r)
	}
}

// commit runs one batch at time now: fn, Finish, "Kafka commit" into l, Commit.
func commit(t testing.TB, s *shard.Shard, l *log, now int64, fn func()) []changelog.Record {
	t.Helper()
	s.Begin(now)
	fn()
	recs, err := s.Finish()
	if err != nil {
		t.Fatal(err)
	}
	if l != nil {
		l.append(recs)
		noErr(t, s.Commit(l.next()))
	} else {
		noErr(t, s.Commit(s.ChangelogOffset()+int64(len(recs))))
	}
	return recs
}

// wantErr asserts err wraps target and its message names every fragment.
func wantErr(t testing.TB, err, target error, fragments ...string) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", target)
	}
	if target != nil && !errors.Is(err, target) {
		t.Fatalf("error %q does not wrap %q", err, target)
	}
	for _, f := range fragments {
		if !strings.Contains(err.Error(), f) {
			t.Fatalf("error %q does not mention %q", err, f)
		}
	}
}

func collect[T any](t testing.TB, seq func(func(T) bool), err error) []T {
	t.Helper()
	noErr(t, err)
	var out []T
	for v := range seq {
		out = append(out, v)
	}
	return out
}
