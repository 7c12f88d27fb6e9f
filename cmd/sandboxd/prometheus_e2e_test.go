//go:build integration

package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/sandboxd/sandboxd/internal/testutil"
)

// TestPrometheusScrapesTheDaemon holds deploy/prometheus to a real
// Prometheus (Debian's): the rules pass promtool's unit tests, load and
// evaluate against a daemon's live metrics, a query returns the runs made,
// and every expression of the dashboard is valid PromQL there.
func TestPrometheusScrapesTheDaemon(t *testing.T) {
	requireDocker(t)
	prom, err1 := exec.LookPath("prometheus")
	promtool, err2 := exec.LookPath("promtool")
	if err1 != nil || err2 != nil {
		testutil.SkipOrFail(t, "Debian's prometheus package is missing (scripts/setup.sh installs it)")
	}
	pack, err := filepath.Abs("../../deploy/prometheus")
	if err != nil {
		t.Fatal(err)
	}
	test := exec.Command(promtool, "test", "rules", "sandboxd-rules.test.yaml")
	test.Dir = pack
	if out, err := test.CombinedOutput(); err != nil {
		t.Fatalf("promtool test rules: %v\n%s", err, out)
	}

	metrics := freeAddr(t)
	d := startDaemon(t, t.TempDir(), instanceName(t), "--metrics-listen", metrics)
	dir := t.TempDir()
	config := fmt.Sprintf(`global: {scrape_interval: 1s, evaluation_interval: 1s}
rule_files: [%q]
scrape_configs:
  - job_name: sandboxd
    static_configs: [{targets: [%q]}]
`, filepath.Join(pack, "sandboxd-rules.yaml"), metrics)
	if err := os.WriteFile(filepath.Join(dir, "prometheus.yml"), []byte(config), 0o644); err != nil {
		t.Fatal(err)
	}
	web := freeAddr(t)
	cmd := exec.Command(prom, "--config.file", filepath.Join(dir, "prometheus.yml"), "--storage.tsdb.path", filepath.Join(dir, "data"),
		"--web.listen-address", web)
	log := &testutil.Buffer{}
	cmd.Stdout, cmd.Stderr = log, log
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})

	for range 2 {
		if stdout, stderr, code := runCLI(t, d, "--lang", "python", "-c", "print(1)"); code != 0 {
			t.Fatalf("run: %q %q %d", stdout, stderr, code)
		}
	}
	// query answers the API's result of a PromQL expression.
	query := func(expr string) (string, []any) {
		resp, err := http.Get("http://" + web + "/api/v1/query?query=" + url.QueryEscape(expr))
		if err != nil {
			return err.Error(), nil
		}
		defer resp.Body.Close()
		var body struct {
			Status string `json:"status"`
			Error  string `json:"error"`
			Data   struct {
				Result []any `json:"result"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		return body.Status + body.Error, body.Data.Result
	}
	deadline := time.Now().Add(90 * time.Second)
	for {
		_, res := query("sum(sandboxd_runs_total)")
		if len(res) == 1 && fmt.Sprint(res[0].(map[string]any)["value"].([]any)[1]) == "2" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Prometheus never saw the 2 runs: %v\n%s", res, log)
		}
		time.Sleep(500 * time.Millisecond)
	}
	if _, res := query(`sandboxd_build_info{job="sandboxd"}`); len(res) != 1 {
		t.Errorf("sandboxd_build_info: %v", res)
	}

	// The rules loaded, every one of the file's, and each evaluated
	// without an error.
	file, err := os.ReadFile(filepath.Join(pack, "sandboxd-rules.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	want := regexp.MustCompile(`(?m)^\s+- (alert|record): `).FindAll(file, -1)
	for {
		resp, err := http.Get("http://" + web + "/api/v1/rules")
		if err != nil {
			t.Fatal(err)
		}
		var body struct {
			Data struct {
				Groups []struct {
					Name  string `json:"name"`
					Rules []struct {
						Name      string `json:"name"`
						Health    string `json:"health"`
						LastError string `json:"lastError"`
					} `json:"rules"`
				} `json:"groups"`
			} `json:"data"`
		}
		json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		rules, healthy, problems := 0, 0, []string{}
		for _, g := range body.Data.Groups {
			for _, r := range g.Rules {
				rules++
				switch r.Health {
				case "ok":
					healthy++
				case "err":
					problems = append(problems, r.Name+": "+r.LastError)
				}
			}
		}
		if len(problems) > 0 {
			t.Fatalf("rules that fail: %v", problems)
		}
		if len(body.Data.Groups) == 2 && rules == len(want) && healthy == rules {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d groups, %d of %d rules evaluated ok\n%s", len(body.Data.Groups), healthy, rules, log)
		}
		time.Sleep(500 * time.Millisecond)
	}

	var dashboard struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err := os.ReadFile(filepath.Join(pack, "sandboxd-dashboard.json"))
	if err == nil {
		err = json.Unmarshal(b, &dashboard)
	}
	if err != nil || len(dashboard.Panels) == 0 {
		t.Fatalf("the dashboard: %v", err)
	}
	grafana := strings.NewReplacer(`$instance`, `.*`, `$__rate_interval`, `1m`)
	for _, p := range dashboard.Panels {
		for _, target := range p.Targets {
			if status, _ := query(grafana.Replace(target.Expr)); status != "success" {
				t.Errorf("panel %q: %s: %s", p.Title, target.Expr, status)
			}
		}
	}
}
