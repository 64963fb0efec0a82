package engine

import "testing"

// Vectors from Kafka's UtilsTest.testMurmur2.
func TestMurmur2MatchesKafka(t *testing.T) {
	for in, want := range map[string]int32{
		"21":                         -973932308,
		"foobar":                     -790332482,
		"a-little-bit-long-string":   -985981536,
		"a-little-bit-longer-string": -1486304829,
		"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8": -58897971,
		"abc": 479470107,
	} {
		if got := Murmur2([]byte(in)); got != want {
			t.Errorf("murmur2(%q) = %d, want %d", in, got, want)
		}
	}
}

func TestPartitionForIsInRange(t *testing.T) {
	for _, k := range []string{"", "a", "b", "x", "21", "foobar"} {
		if p := PartitionFor([]byte(k), 7); p < 0 || p >= 7 {
			t.Fatalf("partition %d for %q", p, k)
		}
	}
}
