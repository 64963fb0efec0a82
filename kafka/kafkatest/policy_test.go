package kafkatest

import (
	"os"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/kstate/kstate/kafka/embedded"
)

// TestChild is what the child processes of TestSelection run; it does
// nothing in a normal run.
func TestChild(t *testing.T) {
	var c *Cluster
	switch os.Getenv("KSTATE_KAFKATEST_CHILD") {
	case "":
		t.Skip("only run as a child of TestSelection")
	case "require":
		c = Start(t, RequireReal())
	default:
		c = Start(t)
	}
	if again := Start(t); again != c {
		t.Fatalf("second Start returned another cluster: %s, first %s", again.Source(), c.Source())
	}
	t.Logf("CHILD GOT source=%q real=%v brokers=%v", c.Source(), c.Real(), c.Brokers())
}

// TestSelection runs Start in child processes whose PATH is empty (no
// java, mvn or docker) and checks which cluster it chooses and what it
// logs: the user's cluster when KSTATE_KAFKA_BROKERS is set; otherwise the
// embedded one, or, with RequireReal, a skip — and a failure when CI=true.
func TestSelection(t *testing.T) {
	if os.Getenv("KSTATE_KAFKATEST_CHILD") != "" {
		t.Skip("child process")
	}
	e, err := embedded.Start(embedded.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	userCluster := strings.Join(e.Brokers(), ",")

	for _, tc := range []struct {
		name     string
		child    string
		ci       string
		brokers  string // KSTATE_KAFKA_BROKERS
		wantFail bool
		want     []string // in the output
		notWant  []string
	}{
		{name: "RequireRealSkips", child: "require",
			want:    []string{"SKIPPING REAL-KAFKA TEST: no Kafka broker could be obtained (docker: no docker client on PATH; jars: "},
			notWant: []string{"CHILD GOT"}},
		{name: "RequireRealFailsInCI", child: "require", ci: "true", wantFail: true,
			want:    []string{"REAL KAFKA REQUIRED (CI=true): no Kafka broker could be obtained"},
			notWant: []string{"CHILD GOT"}},
		{name: "FallsBackToEmbedded", child: "any", ci: "true",
			want: []string{
				"kafkatest: using embedded in-process cluster (kfake) at 127.0.0.1:", // stderr, once
				"kafkatest: no real broker: no Kafka broker could be obtained",       // t.Logf
				`CHILD GOT source="embedded in-process cluster (kfake)" real=false`,
			}},
		{name: "UserCluster", child: "require", ci: "true", brokers: userCluster,
			want: []string{
				"kafkatest: using KSTATE_KAFKA_BROKERS at " + userCluster,
				`CHILD GOT source="KSTATE_KAFKA_BROKERS" real=true brokers=[` + userCluster + `]`,
			},
			notWant: []string{"no real broker", "TestMain"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cmd := exec.Command(os.Args[0], "-test.run=^TestChild$", "-test.v")
			cmd.Env = []string{
				"KSTATE_KAFKATEST_CHILD=" + tc.child,
				"PATH=" + t.TempDir(), // no java, mvn or docker
				"HOME=" + t.TempDir(),
				"KSTATE_CACHE_DIR=" + t.TempDir(),
				"CI=" + tc.ci,
				"KSTATE_KAFKA_BROKERS=" + tc.brokers,
			}
			out, err := cmd.CombinedOutput()
			if failed := err != nil; failed != tc.wantFail {
				t.Fatalf("child failed=%v (%v), want %v; output:\n%s", failed, err, tc.wantFail, out)
			}
			for _, w := range tc.want {
				if !strings.Contains(string(out), w) {
					t.Errorf("output lacks %q", w)
				}
			}
			for _, w := range tc.notWant {
				if strings.Contains(string(out), w) {
					t.Errorf("output has %q", w)
				}
			}
			wantAnnounced := 1
			if slices.Contains(tc.notWant, "CHILD GOT") {
				wantAnnounced = 0
			}
			if n := strings.Count("\n"+string(out), "\nkafkatest: using "); n != wantAnnounced {
				t.Errorf("stderr announced the cluster %d times, want %d (Start was called twice)", n, wantAnnounced)
			}
			if t.Failed() {
				t.Logf("child output:\n%s", out)
			}
		})
	}
}
