package kafkabroker

import (
	"slices"
	"testing"
)

// TestFreePortsDistinct: the broker's and the controller's listener ports
// are never the same (Kafka refuses two listeners on one port), also when
// the broker's port is given.
func TestFreePortsDistinct(t *testing.T) {
	for range 200 {
		ps, err := freePorts(2)
		if err != nil {
			t.Fatal(err)
		}
		if len(ps) != 2 || ps[0] == ps[1] {
			t.Fatalf("freePorts(2) = %v, want two distinct ports", ps)
		}
		qs, err := freePorts(1, ps[0])
		if err != nil {
			t.Fatal(err)
		}
		if len(qs) != 1 || slices.Contains(ps[:1], qs[0]) {
			t.Fatalf("freePorts(1, %d) = %v", ps[0], qs)
		}
	}
}
