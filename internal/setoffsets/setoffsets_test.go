package setoffsets_test

import (
	"context"
	"encoding/binary"
	"errors"
	"maps"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
	"github.com/kstate/kstate/internal/kafka"
	"github.com/kstate/kstate/internal/setoffsets"
	"github.com/kstate/kstate/kafka/embedded"
)

// Set commits the offsets, then records each in its changelog partition.
// A failure between the two (the changelog transaction fails) leaves the
// offsets committed and unrecorded, says so (ErrNotRecorded), and the
// same Set run again completes the protocol.
func TestSetCommitsThenRecords(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Partitions: 3, Topics: map[string]int{"in": 3}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	cc := kafka.ClientConfig{Brokers: e.Brokers()}
	adm, err := cc.NewAdmin()
	if err != nil {
		t.Fatal(err)
	}
	defer adm.Close()
	offsets := map[int32]int64{0: 5, 2: 7}
	req := setoffsets.Request{
		Group: "app", Topic: "in", Offsets: offsets,
		Changelog: setoffsets.ChangelogSpec("app-changelog", 3, nil),
		TxnID:     "app-set-offsets", TxnTimeout: 10 * time.Second,
	}

	// The changelog transaction fails (a client that cannot reach Kafka):
	// the offsets are committed, nothing is recorded.
	err = setoffsets.Set(ctx, kafka.ClientConfig{}, adm, req)
	if !errors.Is(err, setoffsets.ErrNotRecorded) {
		t.Fatalf("Set with a failing transaction: %v, want ErrNotRecorded", err)
	}
	committed, err := adm.CommittedOffsets(ctx, "app", "in")
	if err != nil {
		t.Fatal(err)
	}
	if !maps.Equal(committed, offsets) {
		t.Fatalf("committed %v, want %v", committed, offsets)
	}
	if got := recorded(ctx, t, cc); len(got) != 0 {
		t.Fatalf("changelog holds input offsets %v after the failed transaction", got)
	}

	// Run again: recorded.
	if err := setoffsets.Set(ctx, cc, adm, req); err != nil {
		t.Fatal(err)
	}
	if got := recorded(ctx, t, cc); !maps.Equal(got, offsets) {
		t.Fatalf("changelog records input offsets %v, want %v", got, offsets)
	}
	if committed, err = adm.CommittedOffsets(ctx, "app", "in"); err != nil || !maps.Equal(committed, offsets) {
		t.Fatalf("committed %v, %v; want %v", committed, err, offsets)
	}

	// An existing changelog that does not fit is refused before anything
	// is committed.
	bad := req
	bad.Group, bad.Offsets = "other", map[int32]int64{0: 1}
	bad.Changelog = setoffsets.ChangelogSpec("app-changelog", 2, nil)
	if err := setoffsets.Set(ctx, cc, adm, bad); err == nil {
		t.Fatal("Set accepted a changelog with another partition count")
	}
	if c, err := adm.CommittedOffsets(ctx, "other", "in"); err == nil && len(c) > 0 {
		t.Fatalf("refused Set committed %v", c)
	}
}

// recorded returns the input offset each changelog partition records.
func recorded(ctx context.Context, t *testing.T, cc kafka.ClientConfig) map[int32]int64 {
	t.Helper()
	key, _ := engine.InputOffsetRecord(0)
	got := map[int32]int64{}
	for p := range int32(3) {
		r, err := cc.NewPartitionReader(ctx, "app-changelog", p, 0)
		if err != nil {
			t.Fatal(err)
		}
		view, err := r.ReadView(ctx, nil)
		r.Close()
		if err != nil {
			t.Fatal(err)
		}
		for k, v := range view {
			if k != string(key) {
				t.Fatalf("partition %d: unexpected changelog key %q", p, k)
			}
			if len(v) != 8 {
				t.Fatalf("partition %d: input offset value %x", p, v)
			}
			got[p] = int64(binary.BigEndian.Uint64(v))
		}
	}
	return got
}
