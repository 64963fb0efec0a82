package kafka_test

import (
	"strings"
	"testing"

	"github.com/kstate/kstate/internal/kafka"
)

func TestCheckBroker(t *testing.T) {
	for _, ok := range []string{"kafka", "kafka:9092", "10.0.0.7:9092", "10.0.0.7", "[::1]:9092", "::1", "[fe80::1%eth0]:9092",
		"b-1.kafka.example.com:9094", "kafka-0.kafka-headless.ns.svc.cluster.local:9092", "my_host:1"} {
		if err := kafka.CheckBroker(ok); err != nil {
			t.Errorf("CheckBroker(%q) = %v", ok, err)
		}
	}
	for bad, want := range map[string]string{
		"":               "is empty",
		"::not a host::": "host:port",
		":9092":          "no host",
		"kafka:0":        "port",
		"kafka:65536":    "port",
		"kafka:http":     "port",
		"not a host":     "neither a host name nor an IP",
		"kafka.:9092":    "neither",
		"-kafka:9092":    "neither",
		"kafka:9092/":    "port",
	} {
		if err := kafka.CheckBroker(bad); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckBroker(%q) = %v, want an error saying %q", bad, err, want)
		}
	}
}

func TestCheckNames(t *testing.T) {
	long := strings.Repeat("a", 250)
	for _, tc := range []struct {
		name  string
		check func(string) error
		s     string
		want  string // "" valid
	}{
		{"topic", kafka.CheckTopic, "orders.v1_x-y", ""},
		{"topic 249", kafka.CheckTopic, long[:249], ""},
		{"topic 250", kafka.CheckTopic, long, "over the maximum of 249"},
		{"topic dot", kafka.CheckTopic, ".", `"." and ".."`},
		{"topic dotdot", kafka.CheckTopic, "..", `"." and ".."`},
		{"topic empty", kafka.CheckTopic, "", "is empty"},
		{"topic slash", kafka.CheckTopic, "a/b", "want letters"},
		{"app 237", kafka.CheckApplicationID, long[:237], ""},
		{"app 238", kafka.CheckApplicationID, long[:238], "over the maximum of 237"},
		{"app dotdot", kafka.CheckApplicationID, "..", `"." and ".."`},
		{"app dots inside", kafka.CheckApplicationID, "a..b", ""},
		{"instance", kafka.CheckInstanceID, "host-1a2b3c4d", ""},
		{"instance dot", kafka.CheckInstanceID, ".", `"." and ".."`},
	} {
		err := tc.check(tc.s)
		if (tc.want == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tc.want)) {
			t.Errorf("%s: %q: %v, want %q", tc.name, tc.s, err, tc.want)
		}
	}
}
