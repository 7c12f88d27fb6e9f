package reproducer

import (
	"fmt"
	"strings"
)

// maxDiffLines bounds the inputs of the line diff: above it, the diff only
// points at the first line that differs.
const maxDiffLines = 2000

// UnifiedDiff returns a unified diff of a and b with ctx lines of context,
// cut after max lines.
func UnifiedDiff(a, b, nameA, nameB string, ctx, max int) string {
	x, y := splitLines(a), splitLines(b)
	var out []string
	out = append(out, "--- "+nameA, "+++ "+nameB)
	if len(x) > maxDiffLines || len(y) > maxDiffLines {
		i := 0
		for i < len(x) && i < len(y) && x[i] == y[i] {
			i++
		}
		return strings.Join(append(out, fmt.Sprintf("(too long to diff: %d and %d lines; the first difference is at line %d)", len(x), len(y), i+1)), "\n")
	}
	ops := diffLines(x, y)
	// Group the edits into hunks with ctx lines of context.
	for i := 0; i < len(ops); {
		if ops[i].kind == ' ' {
			i++
			continue
		}
		start := max0(i - ctx)
		end := i
		for end < len(ops) {
			if ops[end].kind != ' ' {
				end++
				continue
			}
			run := end
			for run < len(ops) && ops[run].kind == ' ' {
				run++
			}
			if run == len(ops) || run-end > 2*ctx {
				end = min(end+ctx, len(ops))
				break
			}
			end = run
		}
		ax, bx, an, bn := hunkRange(ops, start, end)
		out = append(out, fmt.Sprintf("@@ -%d,%d +%d,%d @@", ax, an, bx, bn))
		for _, op := range ops[start:end] {
			out = append(out, string(op.kind)+op.line)
		}
		i = end
	}
	if len(out) > max {
		out = append(out[:max], fmt.Sprintf("... (%d more lines)", len(out)-max))
	}
	return strings.Join(out, "\n")
}

type op struct {
	kind byte // ' ', '-', '+'
	line string
	a, b int // line numbers (1-based) in a and b
}

// diffLines is a longest-common-subsequence line diff.
func diffLines(x, y []string) []op {
	n, m := len(x), len(y)
	lcs := make([][]int, n+1)
	for i := range lcs {
		lcs[i] = make([]int, m+1)
	}
	for i := n - 1; i >= 0; i-- {
		for j := m - 1; j >= 0; j-- {
			if x[i] == y[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var ops []op
	i, j := 0, 0
	for i < n || j < m {
		switch {
		case i < n && j < m && x[i] == y[j]:
			ops = append(ops, op{' ', x[i], i + 1, j + 1})
			i, j = i+1, j+1
		case i < n && (j == m || lcs[i+1][j] >= lcs[i][j+1]):
			ops = append(ops, op{'-', x[i], i + 1, j})
			i++
		default:
			ops = append(ops, op{'+', y[j], i, j + 1})
			j++
		}
	}
	return ops
}

// hunkRange returns the start lines and lengths of a hunk in a and b.
func hunkRange(ops []op, start, end int) (ax, bx, an, bn int) {
	for _, o := range ops[start:end] {
		if o.kind != '+' {
			if an == 0 {
				ax = o.a
			}
			an++
		}
		if o.kind != '-' {
			if bn == 0 {
				bx = o.b
			}
			bn++
		}
	}
	if an == 0 {
		ax = ops[start].a
	}
	if bn == 0 {
		bx = ops[start].b
	}
	return ax, bx, an, bn
}

func splitLines(s string) []string {
	if s == "" {
		return nil
	}
	lines := strings.SplitAfter(s, "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	for i, l := range lines {
		if !strings.HasSuffix(l, "\n") {
			lines[i] = l + "\n\\ No newline at end of file"
		} else {
			lines[i] = strings.TrimSuffix(l, "\n")
		}
	}
	return lines
}

func max0(i int) int { return max(i, 0) }
