package engine

import (
	"testing"
	"time"

	"github.com/kstate/kstate/changelog"
)

// TestBatchSizer: without a known lag (a session without high
// watermarks), the poll's fullness stands in for it.
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
				s.observe(batchObs{n: p.n, took: p.took, txn: p.took, lag: -1})
				if got := s.next(); got != p.want {
					t.Fatalf("poll %d (%d records, %v): next limit %d, want %d", i, p.n, p.took, got, p.want)
				}
			}
		})
	}
}

// TestBatchSizerLag: with the lag known, growth needs a backlog of twice
// the limit and a fixed transaction cost of at least a tenth of the
// batch; caught up, the limit drops back to base at once.
func TestBatchSizerLag(t *testing.T) {
	const ms = time.Millisecond
	type batch struct {
		obs  batchObs
		want int
	}
	for _, tc := range []struct {
		name    string
		batches []batch
	}{
		{"backlog and a costly commit grow to the cap", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000}, 10000},
			{batchObs{n: 10000, took: 60 * ms, txn: 20 * ms, lag: 90000}, 20000},
			{batchObs{n: 20000, took: 100 * ms, txn: 25 * ms, lag: 70000}, 40000},
			{batchObs{n: 40000, took: 200 * ms, txn: 50 * ms, lag: 100000}, 40000}}},
		{"a cheap commit does not grow", []batch{
			{batchObs{n: 5000, took: 100 * ms, txn: 9 * ms, lag: 100000}, 5000},
			{batchObs{n: 5000, took: 100 * ms, txn: 10 * ms, lag: 100000}, 10000}}},
		{"a full poll without backlog holds", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 9999}, 5000},
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 10000}, 10000},
			{batchObs{n: 10000, took: 40 * ms, txn: 20 * ms, lag: 19999}, 10000}}},
		{"a short poll with a backlog holds (no halving)", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000}, 10000},
			{batchObs{n: 100, took: 10 * ms, txn: 5 * ms, lag: 8000}, 10000}}},
		{"caught up drops to base at once", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000}, 10000},
			{batchObs{n: 10000, took: 40 * ms, txn: 20 * ms, lag: 100000}, 20000},
			{batchObs{n: 20000, took: 40 * ms, txn: 20 * ms, lag: 4999}, 5000}}},
		{"a heavy changelog does not grow", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: adaptiveMaxStaged/2 + 1}, 5000},
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: adaptiveMaxStaged / 2}, 10000}}},
		{"a changelog over the bound shrinks despite the backlog", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: 1 << 20}, 10000},
			{batchObs{n: 10000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: 2 << 20}, 20000},
			{batchObs{n: 20000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: adaptiveMaxStaged + 1}, 10000},
			{batchObs{n: 10000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: adaptiveMaxStaged}, 10000},
			{batchObs{n: 10000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: 4 * adaptiveMaxStaged}, 5000},
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000, staged: 4 * adaptiveMaxStaged}, 5000}}},
		{"a long batch shrinks despite the backlog", []batch{
			{batchObs{n: 5000, took: 40 * ms, txn: 20 * ms, lag: 100000}, 10000},
			{batchObs{n: 10000, took: 1500 * ms, txn: 1000 * ms, lag: 100000}, 10000},
			{batchObs{n: 10000, took: 2500 * ms, txn: 1000 * ms, lag: 100000}, 5000}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newBatchSizer(5000, 40000, 0)
			for i, b := range tc.batches {
				s.observe(b.obs)
				if got := s.next(); got != b.want {
					t.Fatalf("batch %d %+v: next limit %d, want %d", i, b.obs, got, b.want)
				}
			}
		})
	}
}

// TestChangelogWeight: the batch's changelog records, their key and value
// bytes and stagedRecordCost each, over the tasks that returned a result.
func TestChangelogWeight(t *testing.T) {
	res := []*BatchResult{
		{Changelog: []changelog.Record{{Key: []byte("ab"), Value: []byte("cde")}, {Key: []byte("f")}}},
		nil, // a failed task
		{},
		{Changelog: []changelog.Record{{Key: []byte("g"), Value: make([]byte, 100)}}},
	}
	if got, want := changelogWeight(res), int64(2+3+1+1+100+3*stagedRecordCost); got != want {
		t.Fatalf("changelogWeight = %d, want %d", got, want)
	}
}
