package kstatetest

import (
	"errors"
	"fmt"
	"strings"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
	"github.com/kstate/kstate/processor"
	"github.com/kstate/kstate/state"
)

// Reading state. Each read opens a throw-away shard over the committed
// store of the key's partition (read-only), declares the variable with the
// engine's own state variable implementation, and reads it inside a batch
// at the driver clock that is aborted afterwards. So a test sees exactly
// what the processor would see in the next batch — TTL-expired entries are
// invisible — and a read can change nothing.

// Entry is one MapState entry.
type Entry[UK, V any] struct {
	Key   UK
	Value V
}

// ValueOf returns the committed value of the ValueState name for key, and
// whether there is one. c must be the codec the processor declared it
// with. A variable that no committed batch declared, or that is not a
// ValueState, fails the test.
func ValueOf[T, K, I, O any](d *Driver[K, I, O], key K, name string, c state.Codec[T]) (T, bool) {
	d.t.Helper()
	var v T
	var ok bool
	d.read(key, name, func(s *shard.Shard, opts ...state.Option) error {
		vs, err := shard.NewValueState(s, name, c, opts...)
		if err != nil {
			return err
		}
		return withKey(d, s, key, func() (err error) {
			v, ok, err = vs.Get()
			return err
		})
	})
	return v, ok
}

// ListOf returns the committed elements of the ListState name for key, in
// insertion order (nil when there are none). See ValueOf.
func ListOf[T, K, I, O any](d *Driver[K, I, O], key K, name string, c state.Codec[T]) []T {
	d.t.Helper()
	var out []T
	d.read(key, name, func(s *shard.Shard, opts ...state.Option) error {
		ls, err := shard.NewListState(s, name, c, opts...)
		if err != nil {
			return err
		}
		return withKey(d, s, key, func() error {
			seq, err := ls.Get()
			if err != nil {
				return err
			}
			for v := range seq {
				out = append(out, v)
			}
			return nil
		})
	})
	return out
}

// MapOf returns the committed entries of the MapState name for key, in the
// MapState's iteration order (nil when there are none). See ValueOf.
func MapOf[UK, V, K, I, O any](d *Driver[K, I, O], key K, name string, kc state.Codec[UK], vc state.Codec[V]) []Entry[UK, V] {
	d.t.Helper()
	var out []Entry[UK, V]
	d.read(key, name, func(s *shard.Shard, opts ...state.Option) error {
		ms, err := shard.NewMapState(s, name, kc, vc, opts...)
		if err != nil {
			return err
		}
		return withKey(d, s, key, func() error {
			seq, err := ms.Iterator()
			if err != nil {
				return err
			}
			for k, v := range seq {
				out = append(out, Entry[UK, V]{k, v})
			}
			return nil
		})
	})
	return out
}

// Timers returns the committed timers of key, ascending (nil in NoTime
// mode or when there are none).
func (d *Driver[K, I, O]) Timers(key K) []int64 {
	d.t.Helper()
	if d.top.TimeMode == processor.NoTime {
		return nil
	}
	kb := d.keyBytes(key)
	var out []int64
	d.withShard(key, func(s *shard.Shard) error {
		var err error
		out, err = timers.New(s).List(kb)
		return err
	})
	return out
}

func (d *Driver[K, I, O]) keyBytes(key K) []byte {
	d.t.Helper()
	kb, err := d.top.KeySerde.Serialize(key)
	if err != nil {
		d.t.Fatalf("kstatetest: serialize key %#v: %v", key, err)
	}
	return kb
}

// withKey runs fn in a batch at the driver clock with key as current key;
// the batch is aborted.
func withKey[K, I, O any](d *Driver[K, I, O], s *shard.Shard, key K, fn func() error) error {
	ttlMs := int64(-1)
	if d.top.TimeMode == processor.ProcessingTime {
		ttlMs = d.Now().UnixMilli()
	}
	s.Begin(ttlMs)
	defer s.Abort()
	s.SetCurrentKey(d.keyBytes(key))
	return fn()
}

// read checks that name is a committed variable of key's partition and
// runs declare (which declares and reads it) on a throw-away shard, with
// the variable's stored TTL (a declaration that adds or drops a TTL is
// refused).
func (d *Driver[K, I, O]) read(key K, name string, declare func(*shard.Shard, ...state.Option) error) {
	d.t.Helper()
	d.withShard(key, func(s *shard.Shard) error {
		vars, err := s.Variables()
		if err != nil {
			return err
		}
		var names []string
		found := false
		var opts []state.Option
		for _, v := range vars {
			names = append(names, v.Name)
			if v.Name == name {
				found = true
				if v.TTL > 0 {
					opts = append(opts, state.WithTTL(v.TTL))
				}
				if shard.IsPackedKind(v.Kind) {
					opts = append(opts, state.Packed())
				}
			}
		}
		if !found {
			return fmt.Errorf("partition %d has no committed state variable %q (it has %s); Init declares variables, and the first RunBatch commits them",
				d.partitionOf(key), name, strings.Join(append([]string{}, quote(names)...), ", "))
		}
		s.SetDeclaring(true)
		defer s.SetDeclaring(false)
		return declare(s, opts...)
	})
}

func quote(ss []string) []string {
	if len(ss) == 0 {
		return []string{"none"}
	}
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}

// withShard opens a read-only shard over the committed store of key's
// partition and runs fn on it; an error fails the test.
func (d *Driver[K, I, O]) withShard(key K, fn func(*shard.Shard) error) {
	d.t.Helper()
	if d.closed {
		d.t.Fatalf("kstatetest: reading state of a closed Driver")
	}
	p := d.partitionOf(key)
	store := d.insts[d.owner[p]].store(int32(p))
	if store == nil {
		store = kv.NewMemory() // no batch committed on this instance yet
	}
	s, err := shard.OpenShard(shard.ShardOptions{Backend: readOnly{store}, AllowTTL: true})
	if err == nil {
		err = fn(s)
		if cerr := s.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		d.t.Fatalf("kstatetest: key %#v: %v", key, err)
	}
}

// errReadOnly is returned by writes to a readOnly store.
var errReadOnly = errors.New("kstatetest: state read through the driver is read-only")

// readOnly is a view of a task's store that cannot be written or closed.
type readOnly struct{ kv.Store }

func (readOnly) Write(*kv.Batch, kv.WriteOptions) error { return errReadOnly }
func (readOnly) Close() error                           { return nil }
