package main

import (
	"math"
	"testing"
)

func TestCPUShares(t *testing.T) {
	// perf script -F comm,period: a comm may hold spaces and brackets.
	script := []byte(`         swapper    2000000
         dockerd    2000000
 containerd-shim    3000000
            crun    1000000
  memfd:runc_clo    1000000
   runc:[2:INIT]    1000000
            init    4000000
         python3    6000000
        sandboxd    2000000
     kworker/1:2    1000000
    Chrome Helper    1000000
garbage line
`)
	got := map[string]float64{}
	for _, s := range cpuShares(script, 2) {
		got[s.Class] = s.MsPerTask
	}
	want := map[string]float64{"dockerd": 1, "shim": 1.5, "OCI runtime": 1.5, "init": 2, "program": 3, "daemon": 1, "kernel threads": 0.5, "other": 0.5}
	if len(got) != len(want) {
		t.Fatalf("classes %v, want %v (idle left out)", got, want)
	}
	for c, ms := range want {
		if math.Abs(got[c]-ms) > 1e-9 {
			t.Errorf("%s: %v ms per task, want %v", c, got[c], ms)
		}
	}
	if s := cpuShares(script, 0); len(s) != 0 {
		t.Errorf("no tasks gave %v", s)
	}
}
