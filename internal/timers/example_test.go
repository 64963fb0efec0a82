package timers_test

import (
	"fmt"

	"github.com/kstate/kstate/internal/kv"
	"github.com/kstate/kstate/internal/shard"
	"github.com/kstate/kstate/internal/timers"
)

func Example() {
	s, _ := shard.OpenShard(shard.ShardOptions{Backend: kv.NewMemory()})
	defer s.Close()
	tm := timers.New(s)

	s.Begin(0)
	tm.Register([]byte("bob"), 2000)
	tm.Register([]byte("alice"), 2000)
	tm.Register([]byte("alice"), 1000)
	tm.Register([]byte("alice"), 1000) // no-op
	recs, _ := s.Finish()
	s.Commit(int64(len(recs)))

	s.Begin(2000)
	list, _ := tm.List([]byte("alice"))
	fmt.Println("alice:", list)
	fired, _ := tm.Expired(2000) // by expiry, then key
	for _, t := range fired {
		fmt.Printf("fire %s at %d\n", t.Key, t.Expiry)
		tm.Delete(t.Key, t.Expiry) // the engine deletes a timer after its handler
	}
	recs, _ = s.Finish()
	s.Commit(s.ChangelogOffset() + int64(len(recs)))
	fmt.Println(tm.Stats())
	// Output:
	// alice: [1000 2000]
	// fire alice at 1000
	// fire alice at 2000
	// fire bob at 2000
	// {3 3}
}
