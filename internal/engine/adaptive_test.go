package engine

import (
	"testing"
	"time"
)

func TestBatchSizer(t *testing.T) {
	type poll struct {
		n    int
		took time.Duration
		want int // next() after observing
	}
	const ms = time.Millisecond
	for _, tc := range []struct {
		name      string
		base, cap int
		maxBatch  time.Duration
		polls     []poll
	}{
		{"grow on full, up to the cap", 5000, 20000, 0, []poll{
			{5000, 10 * ms, 10000}, {10000, 10 * ms, 20000}, {20000, 10 * ms, 20000}, {20000, 10 * ms, 20000}}},
		{"cap not a power of two of base", 5000, 15000, 0, []poll{
			{5000, 0, 10000}, {10000, 0, 15000}, {15000, 0, 15000}}},
		{"half full holds", 5000, 20000, 0, []poll{
			{5000, 0, 10000}, {5000, 0, 10000}, {9999, 0, 10000}}},
		{"caught up shrinks toward base", 5000, 40000, 0, []poll{
			{5000, 0, 10000}, {10000, 0, 20000}, {20000, 0, 40000}, {100, 0, 20000}, {0, 0, 10000}, {3, 0, 5000}, {0, 0, 5000}}},
		{"slow full batch does not grow", 5000, 20000, 0, []poll{
			{5000, 10 * ms, 10000}, {10000, 1500 * ms, 10000}, {10000, time.Second, 20000}}},
		{"very slow batch shrinks", 5000, 20000, 0, []poll{
			{5000, 0, 10000}, {10000, 0, 20000}, {20000, 2500 * ms, 10000}, {10000, 3 * time.Second, 5000}, {5000, 3 * time.Second, 5000}}},
		{"MaxBatchDuration/4 bounds growth", 5000, 20000, 2 * time.Second, []poll{
			{5000, 600 * ms, 5000}, {5000, 400 * ms, 10000}, {10000, 1100 * ms, 5000}}},
		{"fixed never changes", 5000, 0, 0, []poll{
			{5000, 0, 5000}, {0, 0, 5000}, {5000, time.Hour, 5000}}},
		{"cap equal to base is fixed", 100, 100, 0, []poll{{100, 0, 100}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newBatchSizer(tc.base, tc.cap, tc.maxBatch)
			if got := s.next(); got != tc.base {
				t.Fatalf("first limit %d, want base %d", got, tc.base)
			}
			for i, p := range tc.polls {
				s.observe(p.n, p.took)
				if got := s.next(); got != p.want {
					t.Fatalf("poll %d (%d records, %v): next limit %d, want %d", i, p.n, p.took, got, p.want)
				}
			}
		})
	}
}
