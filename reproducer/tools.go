package reproducer

import (
	"fmt"
	"strings"

	"github.com/sandboxd/sandboxd/task/tools"
)

// toolCalls compares the requests two runs made on their tool channels:
// each its op, tool, arguments' digest and outcome, in order. A replay
// answers from the record, so the first line that differs is the first
// request where the program asked something different.
func toolCalls(recorded, replayed []byte) Check {
	x, errX := summary(recorded)
	y, errY := summary(replayed)
	c := Check{Name: "tool_calls", Match: errX == nil && errY == nil && strings.Join(x, "\n") == strings.Join(y, "\n")}
	c.Recorded, c.Replayed = fmt.Sprintf("%d requests", len(x)), fmt.Sprintf("%d requests", len(y))
	if errX != nil || errY != nil {
		c.Diff = fmt.Sprintf("unreadable record: %v %v", errX, errY)
		return c
	}
	if !c.Match {
		for i := 0; i < max(len(x), len(y)); i++ {
			if i >= len(x) || i >= len(y) || x[i] != y[i] {
				c.Recorded, c.Replayed = at(x, i), at(y, i)
				break
			}
		}
		c.Diff = UnifiedDiff(strings.Join(x, "\n")+"\n", strings.Join(y, "\n")+"\n", "recorded", "replayed", 2, 40)
	}
	return c
}

func at(lines []string, i int) string {
	if i >= len(lines) {
		return fmt.Sprintf("request %d: none", i+1)
	}
	return fmt.Sprintf("request %d: %s", i+1, lines[i])
}

func summary(record []byte) ([]string, error) {
	calls, err := tools.ParseRecord(record)
	if err != nil {
		return nil, err
	}
	out := make([]string, len(calls))
	for i, c := range calls {
		out[i] = strings.TrimSpace(fmt.Sprintf("%s %s %s -> %s", c.Op, c.Tool, c.ArgumentsDigest, c.Outcome))
	}
	return out, nil
}
