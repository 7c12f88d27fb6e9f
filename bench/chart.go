package main

import (
	"encoding/json"
	"fmt"
	"html"
	"io"
	"math"
	"os"
	"slices"
	"strings"
)

// The chart is one SVG of three panels, drawn from a results file: the
// latency percentiles of every contender (log scale, as they span two
// orders of magnitude), throughput by concurrency, and the host's CPU per
// task by process at concurrency 8.

const (
	chartWidth = 960
	labelWidth = 330
	rowHeight  = 16
)

// palette is one colour a series, in order.
var palette = []string{"#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf", "#393b79", "#637939"}

// chartPath is where the chart of the results file out goes.
func chartPath(out string) string { return strings.TrimSuffix(out, ".json") + ".svg" }

// drawChart writes the chart of res to path.
func drawChart(res results, path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	writeChart(f, res)
	return f.Close()
}

// chartFrom redraws the chart of a results file, next to it.
func chartFrom(in string) error {
	b, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	var res results
	if err := json.Unmarshal(b, &res); err != nil {
		return fmt.Errorf("%s: %w", in, err)
	}
	return drawChart(res, chartPath(in))
}

func writeChart(w io.Writer, res results) {
	var body strings.Builder
	y := 30
	fmt.Fprintf(&body, `<text x="10" y="20" font-size="15" font-weight="bold">sandboxd make bench, %s, %s</text>`+"\n", html.EscapeString(res.Host), res.When.Format("2006-01-02"))
	y = latencyPanel(&body, res.Latency, y+10)
	y = throughputPanel(&body, res.Throughput, y+30)
	y = cpuPanel(&body, res.Throughput, y+30)
	fmt.Fprintf(w, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" font-family="sans-serif" font-size="11">`+"\n", chartWidth, y+20)
	fmt.Fprintf(w, `<rect width="100%%" height="100%%" fill="white"/>`+"\n%s</svg>\n", body.String())
}

// latencyPanel draws a bar to each contender's p50 and ticks at p95 and
// p99, on a log scale from 1 ms.
func latencyPanel(b *strings.Builder, ls []latency, y int) int {
	if len(ls) == 0 {
		return y
	}
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">latency of print(1): bar to p50, ticks at p95 and p99 (log scale)</text>`+"\n", y)
	y += 10
	hi := 1.0
	for _, l := range ls {
		hi = max(hi, l.P99Ms)
	}
	top := math.Pow(10, math.Ceil(math.Log10(hi)))
	x := func(v float64) float64 {
		return labelWidth + (chartWidth-labelWidth-30)*math.Log10(max(v, 1))/math.Log10(top)
	}
	axis := y + len(ls)*rowHeight + 4
	for v := 1.0; v <= top; v *= 10 {
		label := fmt.Sprintf("%g ms", v)
		if v >= 1000 {
			label = fmt.Sprintf("%g s", v/1000)
		}
		fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="#ddd"/><text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", x(v), y, x(v), axis, x(v), axis+12, label)
	}
	for i, l := range ls {
		ry := y + i*rowHeight
		colour := palette[0]
		switch {
		case l.Runtime == "runsc":
			colour = palette[1]
		case l.Runtime == "crun":
			colour = palette[2]
		}
		if !strings.HasPrefix(l.Name, "sandboxd") {
			colour = palette[7]
		}
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s (%s)</text>`, labelWidth-6, ry+11, html.EscapeString(l.Name), l.Runtime)
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="%.1f" height="%d" fill="%s"/>`, labelWidth, ry+2, x(l.P50Ms)-labelWidth, rowHeight-4, colour)
		for _, p := range []float64{l.P95Ms, l.P99Ms} {
			fmt.Fprintf(b, `<line x1="%.1f" y1="%d" x2="%.1f" y2="%d" stroke="black"/>`, x(p), ry+2, x(p), ry+rowHeight-2)
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%.1f</text>`+"\n", x(l.P99Ms)+4, ry+11, l.P50Ms)
	}
	return axis + 16
}

// throughputPanel draws tasks/s by concurrency, a line a contender.
func throughputPanel(b *strings.Builder, ts []throughput, y int) int {
	var names []string
	hi, levels := 1.0, []int{}
	for _, t := range ts {
		if t.Concurrency == 1 && t.Name != "" {
			names = append(names, t.Name)
		}
		hi = max(hi, t.PerSecond)
		if !slices.Contains(levels, t.Concurrency) {
			levels = append(levels, t.Concurrency)
		}
	}
	if len(levels) < 2 {
		return y
	}
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">throughput of print(1), tasks/s by concurrency</text>`+"\n", y)
	y += 10
	height := 180
	top := math.Ceil(hi/5) * 5
	x := func(c int) float64 {
		return labelWidth + float64(slices.Index(levels, c))*float64(chartWidth-labelWidth-40)/float64(len(levels)-1)
	}
	yv := func(v float64) float64 { return float64(y+height) - float64(height)*v/top }
	for v := 0.0; v <= top; v += top / 5 {
		fmt.Fprintf(b, `<line x1="%d" y1="%.1f" x2="%d" y2="%.1f" stroke="#ddd"/><text x="%d" y="%.1f" text-anchor="end">%g</text>`+"\n", labelWidth, yv(v), chartWidth-40, yv(v), labelWidth-4, yv(v)+4, v)
	}
	for _, c := range levels {
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">c=%d</text>`+"\n", x(c), y+height+14, c)
	}
	for i, n := range names {
		colour := palette[i%len(palette)]
		var pts []string
		for _, t := range ts {
			if t.Name == n {
				pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(t.Concurrency), yv(t.PerSecond)))
			}
		}
		if len(pts) == 1 { // a single level: a dot
			fmt.Fprintf(b, `<circle cx="%s" cy="%s" r="3" fill="%s"/>`, strings.Split(pts[0], ",")[0], strings.Split(pts[0], ",")[1], colour)
		}
		fmt.Fprintf(b, `<polyline points="%s" fill="none" stroke="%s" stroke-width="2"/>`, strings.Join(pts, " "), colour)
		fmt.Fprintf(b, `<rect x="10" y="%d" width="10" height="10" fill="%s"/><text x="24" y="%d">%s</text>`+"\n", y+i*rowHeight, colour, y+i*rowHeight+9, html.EscapeString(n))
	}
	return y + height + 24
}

// cpuPanel stacks each concurrency-8 level's CPU per task by process.
func cpuPanel(b *strings.Builder, ts []throughput, y int) int {
	var rows []throughput
	hi := 1.0
	for _, t := range ts {
		if len(t.CPU) > 0 && (t.Concurrency == 8 || strings.Contains(t.Name, "docker run")) {
			rows = append(rows, t)
			var sum float64
			for _, s := range t.CPU {
				sum += s.MsPerTask
			}
			hi = max(hi, sum)
		}
	}
	if len(rows) == 0 {
		return y
	}
	fmt.Fprintf(b, `<text x="10" y="%d" font-size="13" font-weight="bold">host CPU per task by process, ms (concurrency 8; docker run --rm one at a time)</text>`+"\n", y)
	y += 10
	scale := float64(chartWidth-labelWidth-60) / hi
	for i, t := range rows {
		ry := y + i*(rowHeight+4)
		fmt.Fprintf(b, `<text x="%d" y="%d" text-anchor="end">%s</text>`, labelWidth-6, ry+11, html.EscapeString(t.Name))
		x, sum := float64(labelWidth), 0.0
		for _, s := range t.CPU {
			c := palette[max(slices.Index(cpuClasses, s.Class), 0)%len(palette)]
			fmt.Fprintf(b, `<rect x="%.1f" y="%d" width="%.1f" height="%d" fill="%s"><title>%s %.1f ms</title></rect>`, x, ry+2, s.MsPerTask*scale, rowHeight-2, c, html.EscapeString(s.Class), s.MsPerTask)
			x += s.MsPerTask * scale
			sum += s.MsPerTask
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%d">%.0f</text>`+"\n", x+4, ry+12, sum)
	}
	y += len(rows)*(rowHeight+4) + 8
	x := 10
	for i, c := range cpuClasses {
		w := 14 + 6*len(c) + 14
		if x+w > chartWidth {
			x, y = 10, y+rowHeight
		}
		fmt.Fprintf(b, `<rect x="%d" y="%d" width="10" height="10" fill="%s"/><text x="%d" y="%d">%s</text>`, x, y, palette[i%len(palette)], x+14, y+9, html.EscapeString(c))
		x += w
	}
	return y + 16
}
