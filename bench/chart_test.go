package main

import (
	"bytes"
	"encoding/xml"
	"io"
	"testing"
)

func TestChartIsSVG(t *testing.T) {
	res := results{Host: "a<b",
		Latency: []latency{{Name: "sandboxd docker/runc warm", Runtime: "runc", P50Ms: 12, P95Ms: 20, P99Ms: 30},
			{Name: "docker run --rm", Runtime: "runc", P50Ms: 300, P95Ms: 340, P99Ms: 360}},
		Throughput: []throughput{{Name: "docker run --rm (sequential)", Concurrency: 1, PerSecond: 3, CPU: []cpuShare{{"dockerd", 40}}},
			{Name: "sandboxd containerd/crun warm", Concurrency: 1, PerSecond: 9},
			{Name: "sandboxd containerd/crun warm", Concurrency: 8, PerSecond: 11, CPU: []cpuShare{{"shim", 25}, {"OCI runtime", 46}}}},
	}
	var b bytes.Buffer
	writeChart(&b, res)
	rects := 0
	d := xml.NewDecoder(&b)
	for {
		tok, err := d.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("the chart is not XML: %v", err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			rects++
		}
	}
	// The background, 2 latency bars, 2 throughput legend boxes, 3 CPU
	// segments and the CPU legend's boxes.
	if want := 1 + 2 + 2 + 3 + len(cpuClasses); rects != want {
		t.Errorf("%d rects, want %d", rects, want)
	}
}
