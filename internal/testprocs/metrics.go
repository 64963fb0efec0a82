package testprocs

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"regexp"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// Families are parsed Prometheus metric families, by name.
type Families map[string]*dto.MetricFamily

// Scrape GETs /metrics from h and parses the text exposition.
func Scrape(t testing.TB, h http.Handler) Families {
	t.Helper()
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	if rec.Code != 200 {
		t.Fatalf("GET /metrics: %d %s", rec.Code, rec.Body.String())
	}
	// The zero TextParser panics (prometheus/common v0.74.0).
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(strings.NewReader(rec.Body.String()))
	if err != nil {
		t.Fatalf("parse /metrics: %v\n%s", err, rec.Body.String())
	}
	return fams
}

// Names returns the family names, sorted.
func (f Families) Names() []string {
	var out []string
	for n := range f {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Value returns the value of the series of family name whose labels
// include every name=value pair of labels (counter, gauge or untyped; for
// a histogram its sample count), and whether there is one.
func (f Families) Value(name string, labels ...string) (float64, bool) {
	fam := f[name]
	if fam == nil {
		return 0, false
	}
	for _, m := range fam.GetMetric() {
		if hasLabels(m, labels) {
			return value(m), true
		}
	}
	return 0, false
}

// Sum sums the values of every series of family name (histograms: their
// sample counts).
func (f Families) Sum(name string) float64 {
	var s float64
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			s += value(m)
		}
	}
	return s
}

// Series returns the values of family name by the value of label.
func (f Families) Series(name, label string) map[string]float64 {
	out := map[string]float64{}
	if fam := f[name]; fam != nil {
		for _, m := range fam.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == label {
					out[l.GetValue()] = value(m)
				}
			}
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	case m.Histogram != nil:
		return float64(m.GetHistogram().GetSampleCount())
	default:
		return m.GetUntyped().GetValue()
	}
}

func hasLabels(m *dto.Metric, kv []string) bool {
	for i := 0; i+1 < len(kv); i += 2 {
		found := false
		for _, l := range m.GetLabel() {
			if l.GetName() == kv[i] && l.GetValue() == kv[i+1] {
				found = true
			}
		}
		if !found {
			return false
		}
	}
	return true
}

// Has reports whether the exposition has a series named name: a family,
// or the _bucket, _sum or _count series of a histogram family.
func (f Families) Has(name string) bool {
	if _, ok := f[name]; ok {
		return true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if base, ok := strings.CutSuffix(name, suffix); ok {
			if fam := f[base]; fam != nil && fam.GetType() == dto.MetricType_HISTOGRAM {
				return true
			}
		}
	}
	return false
}

var metricName = regexp.MustCompile(`\bkstate_[a-zA-Z0-9_]+`)

// DashboardMetrics returns the kstate_ metric names the PromQL
// expressions ("expr" fields, at any depth) of a Grafana dashboard JSON
// file reference, sorted and unique.
func DashboardMetrics(path string) ([]string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc any
	if err := json.Unmarshal(b, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	seen := map[string]bool{}
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			for k, x := range v {
				if s, ok := x.(string); ok && (k == "expr" || k == "query") {
					for _, m := range metricName.FindAllString(s, -1) {
						seen[m] = true
					}
				}
				walk(x)
			}
		case []any:
			for _, x := range v {
				walk(x)
			}
		}
	}
	walk(doc)
	out := make([]string, 0, len(seen))
	for m := range seen {
		out = append(out, m)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return nil, fmt.Errorf("%s: no kstate_ metric in any expr", path)
	}
	return out, nil
}
