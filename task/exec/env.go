package exec

import (
	"maps"
	"slices"
	"strconv"
	"strings"

	"github.com/sandboxd/sandboxd/images"
	"github.com/sandboxd/sandboxd/limits"
	"github.com/sandboxd/sandboxd/netpolicy"
	"github.com/sandboxd/sandboxd/runtime"
)

// sourceDateEpoch is the fixed SOURCE_DATE_EPOCH of every task
// (2000-01-01T00:00:00Z): tools that stamp times into files stamp this one.
const sourceDateEpoch = "946684800"

// determinismKeys are the variables that make runs reproducible; bundles
// record their effective values.
var determinismKeys = []string{"PYTHONHASHSEED", "TZ", "LC_ALL", "SOURCE_DATE_EPOCH", "SANDBOX_SEED"}

// envVars is the program's environment: defaults chosen for reproducible,
// unbuffered runs, then the image's, then the request's variables.
func (r *Run) envVars() map[string]string {
	return r.ex.Env(r.Image, r.Plan, r.Request.Options.Env)
}

// Env is the environment of a program of plan p on img with the request's
// variables reqEnv: defaults chosen for reproducible, unbuffered runs,
// then the image's, the egress proxy's, then the request's; and the tool
// channel's where the program has one.
func (e *Executor) Env(img runtime.Image, p Plan, reqEnv map[string]string) map[string]string {
	var egress map[string]string
	if p.Network.Mode == netpolicy.AllowList {
		egress = e.EgressEnv()
		if len(p.Network.Secrets) > 0 {
			maps.Copy(egress, e.cfg.Egress.Placeholders(p.Network.Secrets))
		}
	}
	vars := ProgramEnv(img, p.Limits, p.Seed, egress, reqEnv)
	if len(p.Tools) > 0 || p.Channel {
		// The library finds its channel by the variable, and is found
		// next to the program or, for a command or a transpiled
		// TypeScript program (or a session's kernel), by PYTHONPATH and
		// NODE_PATH.
		vars["SANDBOXD_TOOLS_FD"] = strconv.Itoa(runtime.ToolsFD)
		if _, set := vars["PYTHONPATH"]; !set {
			vars["PYTHONPATH"] = images.CodeDir
		}
		if _, set := vars["NODE_PATH"]; !set {
			vars["NODE_PATH"] = images.CodeDir + "/node_modules"
		}
	}
	return vars
}

// EgressEnv are the variables of an allow-listed program: the gateway's
// proxy, and where the gateway terminates TLS the container's trust store
// for the tools that read their own; nil without a gateway.
func (e *Executor) EgressEnv() map[string]string {
	if e.cfg.Egress == nil {
		return nil
	}
	vars := proxyEnv(e.cfg.Egress.ProxyURL())
	if e.cfg.Egress.Terminates() {
		for _, k := range []string{"SSL_CERT_FILE", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NODE_EXTRA_CA_CERTS"} {
			vars[k] = TrustBundlePath
		}
	}
	return vars
}

// TrustBundlePath is the system bundle of trusted certificates (Debian's),
// which an allow-listed container's trust store replaces when the gateway
// terminates TLS.
const TrustBundlePath = "/etc/ssl/certs/ca-certificates.crt"

// ProgramEnv is the environment of a program on img with limits lim, seed
// ("" without), the egress variables (EgressEnv) and the request's.
func ProgramEnv(img runtime.Image, lim limits.Limits, seed string, egress, reqEnv map[string]string) map[string]string {
	threads := strconv.FormatInt(max(1, lim.CPUMillis/1000), 10)
	vars := map[string]string{
		"PATH": "/usr/local/bin:/usr/bin:/bin",
		"HOME": "/tmp",
		// The task's uid has no account: tools that ask who runs them
		// read these first.
		"USER":                    "sandbox",
		"LOGNAME":                 "sandbox",
		"LANG":                    "C.UTF-8",
		"LC_ALL":                  "C.UTF-8",
		"TZ":                      "UTC",
		"PYTHONHASHSEED":          "0",
		"PYTHONDONTWRITEBYTECODE": "1",
		"SOURCE_DATE_EPOCH":       sourceDateEpoch,
		"MPLBACKEND":              "Agg",
		"OMP_NUM_THREADS":         threads,
		"OPENBLAS_NUM_THREADS":    threads,
	}
	if seed != "" {
		vars["SANDBOX_SEED"] = seed
	}
	// What the image's recipe sets (its env lines) comes before the
	// request's variables.
	for _, kv := range img.Env {
		if k, v, ok := strings.Cut(kv, "="); ok {
			vars[k] = v
		}
	}
	maps.Copy(vars, egress)
	maps.Copy(vars, reqEnv)
	return vars
}

// proxyEnv points HTTP clients, pip among them, at the gateway's proxy;
// what ignores them is redirected to the gateway anyway.
func proxyEnv(proxy string) map[string]string {
	return map[string]string{
		"HTTP_PROXY": proxy, "HTTPS_PROXY": proxy, "http_proxy": proxy, "https_proxy": proxy,
		"PIP_PROXY": proxy, "NO_PROXY": "", "no_proxy": "",
	}
}

// SortedEnv is vars as sorted KEY=VALUE pairs.
func SortedEnv(vars map[string]string) []string {
	env := make([]string, 0, len(vars))
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	slices.Sort(env)
	return env
}
