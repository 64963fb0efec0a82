package integration

import (
	"testing"

	"github.com/kstate/kstate/internal/testprocs"
)

// checkDashboard: every metric the Grafana dashboard queries exists in f
// (a real exposition of a running App).
func checkDashboard(t *testing.T, f testprocs.Families) {
	t.Helper()
	names, err := testprocs.DashboardMetrics("../docs/grafana/kstate-dashboard.json")
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range names {
		if !f.Has(name) {
			t.Errorf("docs/grafana/kstate-dashboard.json queries %s, which a running App does not expose; families %v", name, f.Names())
		}
	}
}
