package main

import "github.com/kstate/kstate/internal/benchwork"

// The heavy workload (-processor heavy): benchwork.Heavy, as `kstate bench`'s
// heavy processor and as the Kafka Streams and Flink peers of
// internal/tools/benchpeers/heavy: per key a list of the last heavyHistory
// values, a map of 4 aggregates (count, sum, min, max) and one
// processing-time timer, moved on every call to now + heavyIdle. A row's
// value is its send time (the first 8 bytes of the input). The output is
// count's: the map's count after the row and the row's send time.
//
// Timer semantics, identical in the three peers: the timer never fires
// during a run (heavyIdle is far beyond one); if it fires, it clears the
// key's list and map (and the timer is gone) and emits nothing.
const (
	heavyHistory = 5
	heavyIdle    = benchwork.HeavyIdle
)

func newHeavy() *benchwork.Heavy[int64, countOut] {
	return &benchwork.Heavy[int64, countOut]{
		History: heavyHistory,
		Value:   func(sent int64) int64 { return sent },
		Out:     func(n, sent int64) countOut { return countOut{count: n, sentNs: sent} },
	}
}
