package shard_test

import (
	"fmt"
	"time"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/state"
)

// exampleShard opens a shard on the in-memory backend.
func exampleShard(allowTTL bool) *shard.Shard {
	s, err := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory(), AllowTTL: allowTTL})
	if err != nil {
		panic(err)
	}
	return s
}

func ExampleValueState() {
	s := exampleShard(false)
	defer s.Close()

	s.SetDeclaring(true) // the engine does this around the processor's Init
	count, err := shard.NewValueState(s, "count", state.Int64())
	s.SetDeclaring(false)
	if err != nil {
		panic(err)
	}

	s.Begin(0)
	for _, user := range []string{"alice", "bob", "alice"} {
		s.SetCurrentKey([]byte(user))
		n, _, _ := count.Get() // absent reads as ok=false; n is then 0
		count.Update(n + 1)
	}
	recs, _ := s.Finish()
	s.Commit(int64(len(recs)))

	s.Begin(0)
	s.SetCurrentKey([]byte("alice"))
	n, ok, _ := count.Get()
	fmt.Println("alice:", n, ok)
	s.SetCurrentKey([]byte("carol"))
	_, ok, _ = count.Get()
	fmt.Println("carol exists:", ok)
	s.Abort()
	// Output:
	// alice: 2 true
	// carol exists: false
}

func ExampleListState() {
	s := exampleShard(false)
	defer s.Close()
	s.SetDeclaring(true)
	events, _ := shard.NewListState(s, "events", state.String())
	s.SetDeclaring(false)

	s.Begin(0)
	s.SetCurrentKey([]byte("order-1"))
	events.Put([]string{"created"})
	events.AppendValue("paid")
	events.AppendList([]string{"packed", "shipped"})
	all, _ := events.Get()
	for e := range all {
		fmt.Println(e)
	}
	err := events.AppendList(nil)
	fmt.Println(err)
	s.Abort()
	// Output:
	// created
	// paid
	// packed
	// shipped
	// state: ListState "events": AppendList: empty list (use Clear to remove the list)
}

func ExampleMapState() {
	s := exampleShard(false)
	defer s.Close()
	s.SetDeclaring(true)
	byHour, _ := shard.NewMapState(s, "clicksByHour", state.Int(), state.Int64())
	s.SetDeclaring(false)

	s.Begin(0)
	s.SetCurrentKey([]byte("page-7"))
	for _, h := range []int{13, -1, 9, 13} {
		n, _, _ := byHour.GetValue(h)
		byHour.UpdateValue(h, n+1)
	}
	byHour.RemoveKey(9)
	entries, _ := byHour.Iterator() // ordered by key: the Int codec is order-preserving
	for h, n := range entries {
		fmt.Println(h, n)
	}
	s.Abort()
	// Output:
	// -1 1
	// 13 2
}

func ExampleWithTTL() {
	s := exampleShard(true) // TTL needs ProcessingTime mode
	defer s.Close()
	s.SetDeclaring(true)
	session, _ := shard.NewValueState(s, "session", state.String(), state.WithTTL(30*time.Minute))
	s.SetDeclaring(false)

	start := int64(1_700_000_000_000) // batch processing times, ms
	s.Begin(start)
	s.SetCurrentKey([]byte("alice"))
	session.Update("token-1")
	recs, _ := s.Finish()
	s.Commit(int64(len(recs)))

	for _, at := range []time.Duration{29 * time.Minute, 30 * time.Minute} {
		s.Begin(start + at.Milliseconds())
		s.SetCurrentKey([]byte("alice"))
		_, ok, _ := session.Get()
		fmt.Printf("after %v: present=%v\n", at, ok)
		recs, _ := s.Finish() // expired entries are tombstoned here
		fmt.Println("  changelog records:", len(recs))
		s.Commit(int64(len(recs)))
	}
	fmt.Println("TTL removals:", s.Stats().TTLRemovals)
	// Output:
	// after 29m0s: present=true
	//   changelog records: 0
	// after 30m0s: present=false
	//   changelog records: 2
	// TTL removals: 1
}
