package engine

import (
	"context"
	"testing"
	"time"
)

// TestStandbyRateLimit: the standby reader's throughput bound waits, on
// the Clock, for the rest of the second once a second's bytes are read,
// and never without a bound.
func TestStandbyRateLimit(t *testing.T) {
	ctx := context.Background()
	clk := &manualClock{}
	l := rateLimit{rate: 1000}
	var read int64
	for clk.el < 10*time.Second {
		if err := l.wait(ctx, clk); err != nil {
			t.Fatal(err)
		}
		l.spent(300) // one chunk
		read += 300
		clk.el += time.Millisecond // reading it took 1ms
	}
	// At most rate per second, plus the one chunk that crosses it.
	if perSec := read / 10; perSec > 1000+300 || perSec < 1000 {
		t.Errorf("read %d bytes/s under a bound of 1000 bytes/s (chunks of 300)", perSec)
	}

	clk = &manualClock{}
	free := rateLimit{rate: -1}
	for range 1000 {
		free.spent(1 << 30)
		if err := free.wait(ctx, clk); err != nil {
			t.Fatal(err)
		}
	}
	if clk.el != 0 {
		t.Errorf("without a bound the reader waited %v", clk.el)
	}
}
