package integration

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestDockerComposeCluster validates docker-compose.yml, which CI cannot run
// (no Docker engine): three KRaft nodes that agree on one quorum, distinct
// host ports, and replication settings of 3 with min.insync.replicas=2.
func TestDockerComposeCluster(t *testing.T) {
	raw, err := os.ReadFile("../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		Services map[string]struct {
			Image       string            `yaml:"image"`
			Ports       []string          `yaml:"ports"`
			Environment map[string]string `yaml:"environment"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(raw, &doc); err != nil {
		t.Fatalf("docker-compose.yml is not valid YAML: %v", err)
	}
	if len(doc.Services) != 3 {
		t.Fatalf("want 3 services, got %d", len(doc.Services))
	}
	ids, ports := map[string]bool{}, map[string]bool{}
	var voters string
	for name, s := range doc.Services {
		env := s.Environment
		if !strings.HasPrefix(s.Image, "apache/kafka:4.") {
			t.Errorf("%s: image %q is not the official apache/kafka 4.x image", name, s.Image)
		}
		for key, want := range map[string]string{
			"KAFKA_PROCESS_ROLES":                            "broker,controller",
			"KAFKA_DEFAULT_REPLICATION_FACTOR":               "3",
			"KAFKA_MIN_INSYNC_REPLICAS":                      "2",
			"KAFKA_OFFSETS_TOPIC_REPLICATION_FACTOR":         "3",
			"KAFKA_TRANSACTION_STATE_LOG_REPLICATION_FACTOR": "3",
			"KAFKA_TRANSACTION_STATE_LOG_MIN_ISR":            "2",
		} {
			if env[key] != want {
				t.Errorf("%s: %s = %q, want %q", name, key, env[key], want)
			}
		}
		if ids[env["KAFKA_NODE_ID"]] {
			t.Errorf("%s: duplicate node id %s", name, env["KAFKA_NODE_ID"])
		}
		ids[env["KAFKA_NODE_ID"]] = true
		if voters == "" {
			voters = env["KAFKA_CONTROLLER_QUORUM_VOTERS"]
		} else if voters != env["KAFKA_CONTROLLER_QUORUM_VOTERS"] {
			t.Errorf("%s: quorum voters %q differ from %q", name, env["KAFKA_CONTROLLER_QUORUM_VOTERS"], voters)
		}
		if !strings.Contains(voters, fmt.Sprintf("%s@%s:", env["KAFKA_NODE_ID"], name)) {
			t.Errorf("%s: node %s is not in the quorum voters %q", name, env["KAFKA_NODE_ID"], voters)
		}
		if len(s.Ports) != 1 || ports[s.Ports[0]] {
			t.Errorf("%s: want one distinct host port, got %v", name, s.Ports)
		}
		ports[strings.Join(s.Ports, ",")] = true
		if !strings.Contains(env["KAFKA_ADVERTISED_LISTENERS"], "localhost:"+strings.Split(s.Ports[0], ":")[0]) {
			t.Errorf("%s: advertised listeners %q do not expose the host port %s", name, env["KAFKA_ADVERTISED_LISTENERS"], s.Ports[0])
		}
	}
	if strings.Count(voters, "@") != 3 {
		t.Errorf("quorum voters %q: want 3", voters)
	}
}
