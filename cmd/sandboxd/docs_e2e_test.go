//go:build integration

package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	pb "github.com/sandboxd/sandboxd/proto/sandboxd/v1"
)

// TestDocsConsoleExamples runs the commands of every ```console block of
// the README and docs/ against a daemon of its own, as a reader would
// type them in one shell, and compares what each prints with what the
// docs show. A block the test machine cannot run says why in a comment
// just above it: <!-- doc-test: skip: REASON -->.
func TestDocsConsoleExamples(t *testing.T) {
	requireDocker(t)
	files, _ := filepath.Glob("../../docs/*.md")
	files = append([]string{"../../README.md"}, files...)
	// What the commands find where a reader would after make run:
	// bin/sandboxd, and no sandboxd on the PATH (make run puts none there).
	work := t.TempDir()
	bin := filepath.Join(work, "bin")
	os.MkdirAll(bin, 0o755)
	os.Symlink(binary, filepath.Join(bin, "sandboxd"))
	for _, file := range files {
		b, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		blocks, err := parseConsoleBlocks(string(b))
		if err != nil {
			t.Fatalf("%s: %v", file, err)
		}
		name := strings.TrimPrefix(file, "../../")
		t.Run(name, func(t *testing.T) {
			var d *daemon
			for _, blk := range blocks {
				if blk.skip == "" && d == nil {
					// As make run starts it: the inbound proxy on, and a
					// warm pool of one an image, whose interpreters are
					// pre-started.
					d = startDaemon(t, t.TempDir(), instanceName(t), "--pool-size", "1", "--inbound-listen", "127.0.0.1:0")
					waitPoolsReady(t, d)
				}
				t.Run(fmt.Sprintf("line %d", blk.line), func(t *testing.T) {
					if blk.skip != "" {
						t.Skip(blk.skip)
					}
					runConsoleBlock(t, d, work, blk)
				})
			}
		})
	}
}

// consoleBlock is a ```console block: commands, each with what it prints.
type consoleBlock struct {
	line int
	skip string
	cmds []consoleCommand
}

type consoleCommand struct {
	line int
	text string
	want []string
}

var skipMark = regexp.MustCompile(`^<!-- doc-test: skip: (.+) -->$`)

// parseConsoleBlocks finds the console blocks of a Markdown text. A
// command starts at a line with a prompt ("$ " or "# ") and goes on while
// its quotes are open or it ends in a backslash.
func parseConsoleBlocks(text string) ([]consoleBlock, error) {
	lines := strings.Split(text, "\n")
	var blocks []consoleBlock
	for i := 0; i < len(lines); i++ {
		if lines[i] != "```console" {
			continue
		}
		blk := consoleBlock{line: i + 1}
		if i > 0 {
			if m := skipMark.FindStringSubmatch(lines[i-1]); m != nil {
				blk.skip = m[1]
			}
		}
		for i++; i < len(lines) && lines[i] != "```"; i++ {
			l := lines[i]
			prompt := strings.HasPrefix(l, "$ ") || strings.HasPrefix(l, "# ")
			if !prompt {
				if len(blk.cmds) == 0 {
					return nil, fmt.Errorf("line %d: output before any command", i+1)
				}
				c := &blk.cmds[len(blk.cmds)-1]
				c.want = append(c.want, l)
				continue
			}
			c := consoleCommand{line: i + 1, text: l[2:]}
			for continues(c.text) && i+1 < len(lines) && lines[i+1] != "```" {
				i++
				c.text += "\n" + lines[i]
			}
			blk.cmds = append(blk.cmds, c)
		}
		blocks = append(blocks, blk)
	}
	return blocks, nil
}

// continues says whether a shell command line goes on on the next: a
// quote left open, or a backslash at its end.
func continues(cmd string) bool {
	var quote rune
	escaped := false
	for _, r := range cmd {
		switch {
		case escaped:
			escaped = false
		case r == '\\' && quote != '\'':
			escaped = true
		case quote != 0:
			if r == quote {
				quote = 0
			}
		case r == '\'' || r == '"':
			quote = r
		case r == '#' && quote == 0:
			// A comment: the rest of the line is not the command's.
			return escaped
		}
	}
	return quote != 0 || escaped
}

// runConsoleBlock runs blk's commands, in order, in one shell in work,
// talking to d, and compares their output with the block's.
func runConsoleBlock(t *testing.T, d *daemon, work string, blk consoleBlock) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	sh := exec.CommandContext(ctx, "bash", "--norc", "--noprofile")
	sh.Dir = work
	sh.Env = append(os.Environ(), "SANDBOXD_ADDR="+d.socket)
	stdin, _ := sh.StdinPipe()
	pr, pw := io.Pipe()
	sh.Stdout, sh.Stderr = pw, pw
	if err := sh.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		sh.Wait()
		pw.Close()
	}()
	out := bufio.NewReader(pr)
	// What the docs show of ids and digests, to what this run printed:
	// a later command names them.
	seen := map[string]string{}
	for _, c := range blk.cmds {
		text := substitute(c.text, seen)
		fmt.Fprintf(stdin, "%s\necho '@@end@@'\n", text)
		var got []string
		for {
			line, err := out.ReadString('\n')
			if err != nil {
				t.Fatalf("line %d: %s: %v; printed %q", c.line, text, err, got)
			}
			line = strings.TrimSuffix(line, "\n")
			if line == "@@end@@" {
				break
			}
			got = append(got, line)
		}
		if !matchOutput(c.want, got) {
			t.Errorf("line %d: %s\nprinted:\n%s\nthe docs show:\n%s", c.line, text, strings.Join(got, "\n"), strings.Join(c.want, "\n"))
			continue
		}
		learn(c.want, got, seen)
	}
}

// The values that differ from run to run, and what they are compared as.
// A size is compared within sizeFactor of the docs' (a bundle's size
// that grew fourfold is stale); a time is not compared.
var (
	size       = regexp.MustCompile(`\b(\d+(?:\.\d+)?) ?(KiB|MiB|GiB|KB|MB|GB|B)\b`)
	longHex    = regexp.MustCompile(`\b[0-9a-f]{24}\b|\b[0-9a-f]{64}\b`)
	shownHex   = regexp.MustCompile(`\b([0-9a-f]{6,})\.\.\.([0-9a-f]*)`)
	normalised = []struct {
		re   *regexp.Regexp
		with string
	}{
		{regexp.MustCompile(`sha256[: ][0-9a-f]+(\.\.\.[0-9a-f]*)?`), "sha256:<digest>"},
		{regexp.MustCompile(`\b[0-9a-f]{64}\b`), "<key>"},
		{regexp.MustCompile(`\b[0-9a-f]{24}\b`), "<id>"},
		{regexp.MustCompile(`\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(\.\d+)?Z?`), "<time>"},
		{regexp.MustCompile(`\b\d\d:\d\d:\d\d(\.\d+)?\b`), "<clock>"},
		{size, "<size>"},
		{regexp.MustCompile(`\b\d+(\.\d+)? ?(ns|µs|ms|s)\b`), "<n>"},
		{regexp.MustCompile(`\b(warm|cold)\b`), "<start>"},
		{regexp.MustCompile(`\b(runc|crun) \d\S*`), "<runtime>"},
		{regexp.MustCompile(`\b(runc|crun)\b`), "<runtime>"},
		{regexp.MustCompile(`instance \S+, sandboxd \S+`), "instance <name>, sandboxd <version>"},
	}
)

func normalise(s string) string {
	for _, n := range normalised {
		s = n.re.ReplaceAllString(s, n.with)
	}
	return strings.TrimRight(s, " ")
}

// sizeFactor is how far a printed size may be from the docs' one.
const sizeFactor = 2

// bytesOf is a size as the docs write it, in bytes.
func bytesOf(m []string) float64 {
	n, _ := strconv.ParseFloat(m[1], 64)
	unit := map[string]float64{"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 1e3, "MB": 1e6, "GB": 1e9}[m[2]]
	return n * unit
}

// sizesMatch says whether the sizes in got are those of want, one for
// one, each within sizeFactor; where a "..." of the docs may hide some,
// their counts may differ and nothing is compared.
func sizesMatch(want, got string) bool {
	w, g := size.FindAllStringSubmatch(want, -1), size.FindAllStringSubmatch(got, -1)
	if len(w) != len(g) {
		return strings.Contains(want, "...")
	}
	for i := range w {
		a, b := bytesOf(w[i]), bytesOf(g[i])
		if a > b*sizeFactor || b > a*sizeFactor {
			return false
		}
	}
	return true
}

// matchOutput compares printed lines with the docs', both normalised: a
// line "..." of the docs stands for any lines, "..." in a line for any
// text. Nothing may follow what the docs show, unless they end in "...".
func matchOutput(want, got []string) bool {
	for len(want) > 0 && strings.TrimSpace(want[len(want)-1]) == "" {
		want = want[:len(want)-1]
	}
	for len(got) > 0 && strings.TrimSpace(got[len(got)-1]) == "" {
		got = got[:len(got)-1]
	}
	if len(want) == 0 {
		return len(got) == 0
	}
	if strings.TrimSpace(want[0]) == "..." {
		for i := 0; i <= len(got); i++ {
			if matchOutput(want[1:], got[i:]) {
				return true
			}
		}
		return false
	}
	if len(got) == 0 {
		return false
	}
	parts := strings.Split(normalise(want[0]), "...")
	for i := range parts {
		parts[i] = regexp.QuoteMeta(parts[i])
	}
	if !regexp.MustCompile(`^`+strings.Join(parts, `.*`)+`$`).MatchString(normalise(got[0])) || !sizesMatch(want[0], got[0]) {
		return false
	}
	return matchOutput(want[1:], got[1:])
}

// learn maps the ids and digests the docs show to those printed in their
// place, line by line.
func learn(want, got []string, seen map[string]string) {
	for i := 0; i < len(want) && i < len(got); i++ {
		w, g := longHex.FindAllString(want[i], -1), longHex.FindAllString(got[i], -1)
		if len(w) == len(g) {
			for j := range w {
				seen[w[j]] = g[j]
			}
		}
	}
}

// substitute puts in cmd the printed values of the ids and digests the
// docs show, whole or cut ("2d41de26...d9a011").
func substitute(cmd string, seen map[string]string) string {
	cmd = longHex.ReplaceAllStringFunc(cmd, func(h string) string {
		if v, ok := seen[h]; ok {
			return v
		}
		return h
	})
	return shownHex.ReplaceAllStringFunc(cmd, func(s string) string {
		m := shownHex.FindStringSubmatch(s)
		for w, g := range seen {
			if strings.HasPrefix(w, m[1]) && strings.HasSuffix(w, m[2]) {
				return g
			}
		}
		return s
	})
}

// waitPoolsReady waits until every warm pool of d holds its container.
func waitPoolsReady(t *testing.T, d *daemon) {
	t.Helper()
	conn := d.conn()
	defer conn.Close()
	deadline := time.Now().Add(2 * time.Minute)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		resp, err := pb.NewSandboxServiceClient(conn).ListImages(ctx, &pb.ListImagesRequest{})
		cancel()
		ready := err == nil && len(resp.GetPools()) > 0
		for _, p := range resp.GetPools() {
			ready = ready && p.GetReady() >= p.GetSize()
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the warm pools were not ready in 2 minutes: %v %v", resp.GetPools(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
