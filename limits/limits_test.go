package limits

import (
	"strings"
	"testing"
	"time"

	"github.com/containerd/errdefs"
)

func TestResolve(t *testing.T) {
	p := DefaultPolicy()
	tests := []struct {
		name    string
		req     Limits
		want    Limits
		wantErr string
	}{
		{name: "zero takes every default", req: Limits{}, want: Defaults()},
		{
			name: "set fields are kept",
			req:  Limits{MemoryBytes: 128 << 20, Timeout: 2 * time.Second},
			want: func() Limits { l := Defaults(); l.MemoryBytes = 128 << 20; l.Timeout = 2 * time.Second; return l }(),
		},
		{name: "negative", req: Limits{Pids: -1}, wantErr: "limits.pids: -1 is negative"},
		{name: "below minimum", req: Limits{MemoryBytes: 1 << 20}, wantErr: "limits.memory_bytes: 1048576 (1MiB) is below the minimum 16777216 (16MiB)"},
		{name: "above maximum is refused, not clamped", req: Limits{CPUMillis: 64000}, wantErr: "limits.cpu_millis: 64000 is above the operator's maximum 4000"},
		{name: "timeout in milliseconds", req: Limits{Timeout: time.Hour}, wantErr: "limits.timeout_ms: 3600000 (1h0m0s) is above the operator's maximum 600000 (10m0s)"},
		{name: "disk", req: Limits{DiskBytes: 1 << 40}, wantErr: "limits.disk_bytes"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := p.Resolve(tt.req)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve() error = %v, want one containing %q", err, tt.wantErr)
				}
				if !errdefs.IsInvalidArgument(err) {
					t.Fatalf("Resolve() error %v is not an invalid argument", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got != tt.want {
				t.Fatalf("Resolve() = %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestPolicyValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Policy)
		wantErr string
	}{
		{name: "default policy", mutate: func(*Policy) {}},
		{name: "default above max", mutate: func(p *Policy) { p.Default.MemoryBytes = p.Max.MemoryBytes + 1 }, wantErr: "default memory_bytes"},
		{name: "max below minimum", mutate: func(p *Policy) { p.Max.Pids = 1 }, wantErr: "maximum pids 1 is below the minimum"},
		{name: "zero default", mutate: func(p *Policy) { p.Default.Timeout = 0 }, wantErr: "default timeout_ms 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := DefaultPolicy()
			tt.mutate(&p)
			err := p.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want %q", err, tt.wantErr)
			}
		})
	}
}
