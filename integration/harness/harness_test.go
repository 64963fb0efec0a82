package harness

import (
	"os"
	"os/exec"
	"strings"
	"testing"
)

// TestNoBrokerPolicy runs a test that needs a broker in a child process with
// no way to obtain one, and checks it is skipped normally but fails in CI.
func TestNoBrokerPolicy(t *testing.T) {
	if os.Getenv("KSTATE_HARNESS_CHILD") == "1" {
		Brokers(t)
		t.Log("CHILD GOT A BROKER")
		return
	}
	for _, tc := range []struct {
		ci       string
		wantFail bool
		wantText string
	}{
		{ci: "", wantFail: false, wantText: "SKIPPING REAL-KAFKA TEST"},
		{ci: "true", wantFail: true, wantText: "REAL KAFKA REQUIRED (CI=true)"},
	} {
		cmd := exec.Command(os.Args[0], "-test.run=^TestNoBrokerPolicy$", "-test.v")
		cmd.Env = []string{
			"KSTATE_HARNESS_CHILD=1",
			"PATH=" + t.TempDir(), // no java, mvn or docker
			"HOME=" + t.TempDir(),
			"KSTATE_CACHE_DIR=" + t.TempDir(),
			"CI=" + tc.ci,
		}
		out, err := cmd.CombinedOutput()
		failed := err != nil
		if failed != tc.wantFail || !strings.Contains(string(out), tc.wantText) {
			t.Fatalf("CI=%q: failed=%v, want %v; output:\n%s", tc.ci, failed, tc.wantFail, out)
		}
		if strings.Contains(string(out), "CHILD GOT A BROKER") {
			t.Fatalf("CI=%q: child obtained a broker with nothing on PATH:\n%s", tc.ci, out)
		}
	}
}
