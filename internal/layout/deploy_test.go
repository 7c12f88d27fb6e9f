package layout

import (
	"os"
	"strings"
	"testing"
)

// TestPrometheusRuleIsTheRules: the Kubernetes component's PrometheusRule
// carries deploy/prometheus/sandboxd-rules.yaml's groups, unchanged, so
// that the rules promtool tests are the rules a cluster loads.
func TestPrometheusRuleIsTheRules(t *testing.T) {
	rules, err := os.ReadFile("../../deploy/prometheus/sandboxd-rules.yaml")
	if err != nil {
		t.Fatal(err)
	}
	crd, err := os.ReadFile("../../deploy/kubernetes/monitoring/prometheusrule.yaml")
	if err != nil {
		t.Fatal(err)
	}
	want := string(rules[strings.Index(string(rules), "groups:"):])
	spec := string(crd[strings.Index(string(crd), "spec:\n")+len("spec:\n"):])
	var got strings.Builder
	for _, line := range strings.SplitAfter(spec, "\n") {
		got.WriteString(strings.TrimPrefix(line, "  "))
	}
	if got.String() != want {
		t.Fatal("deploy/kubernetes/monitoring/prometheusrule.yaml's spec is not deploy/prometheus/sandboxd-rules.yaml's groups: copy them over, indented by two spaces")
	}
}
