package kstate_test

import (
	"os/exec"
	"strings"
	"testing"
)

// A service that imports kstate must not link the in-process broker or the
// Docker libraries: they are for tests only (kafka/embedded,
// kafka/kafkatest), and a production binary would carry them for nothing.
func TestRootDoesNotLinkTestBrokers(t *testing.T) {
	goCmd, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command on PATH to list dependencies with")
	}
	out, err := exec.Command(goCmd, "list", "-deps", "github.com/kstate/kstate").CombinedOutput()
	if err != nil {
		t.Fatalf("go list -deps: %v\n%s", err, out)
	}
	deps := strings.Fields(string(out))
	if len(deps) < 10 {
		t.Fatalf("go list -deps listed only %v", deps)
	}
	for _, d := range deps {
		for _, banned := range []string{"github.com/twmb/franz-go/pkg/kfake", "github.com/testcontainers/", "github.com/kstate/kstate/kafka/embedded", "github.com/kstate/kstate/kafka/kafkatest"} {
			if strings.HasPrefix(d, banned) {
				t.Errorf("github.com/kstate/kstate depends on %s", d)
			}
		}
	}
}
