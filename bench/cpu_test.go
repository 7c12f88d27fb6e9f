package main

import (
	"math"
	"testing"
)

func TestCPUShares(t *testing.T) {
	// perf script -F comm,pid,period --show-mmap-events
	// --show-task-events: a comm may hold spaces and brackets; exe is
	// told apart by the binary its process mapped.
	script := []byte(`         swapper     0    2000000
         dockerd   100    2000000
 containerd-shim   200    3000000
            crun   300    1000000
  memfd:runc_clo   301    1000000
   runc:[2:INIT]   302    1000000
           runsc   400    1000000
         dockerd   100 PERF_RECORD_FORK(500:500):(100:101)
             exe   500 PERF_RECORD_COMM exec: exe:500/500
             exe   500    1000000
             exe   500 PERF_RECORD_MMAP2 500/500: [0x55b572563000(0x19fd000) @ 0x10e9000 fe:00 10706976 1488572899]: r-xp /usr/sbin/dockerd
             exe   500 PERF_RECORD_MMAP2 500/500: [0x7f585afd3000(0x26000) @ 0x1000 fe:00 325835 0]: r-xp /usr/lib/x86_64-linux-gnu/ld-linux-x86-64.so.2
             exe   500    1000000
             exe   600 PERF_RECORD_COMM exec: exe:600/600
             exe   600 PERF_RECORD_MMAP2 600/600: [0x400000(0xe52000) @ 0 fe:00 827394 3775737978]: r-xp /usr/local/lib/sandboxd/runsc
             exe   600    3000000
             exe   600 PERF_RECORD_FORK(601:601):(600:600)
             exe   601    1000000
             exe   700    1000000
            init   800    4000000
         python3   801    6000000
        sandboxd   900    2000000
     kworker/1:2    20    1000000
    Chrome Helper   999    1000000
garbage line
`)
	got := map[string]float64{}
	for _, s := range cpuShares(script, 2) {
		got[s.Class] = s.MsPerTask
	}
	want := map[string]float64{"dockerd": 2, "shim": 1.5, "OCI runtime": 2, "gVisor sandbox": 2.5, "init": 2, "program": 3, "daemon": 1, "kernel threads": 0.5, "other": 0.5}
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
