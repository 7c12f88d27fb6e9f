package builder

import (
	"bufio"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// AptMirror is the URI of the Debian source apt uses for suite, from its
// deb822 .sources files or the classic sources.list: the one mirror this
// host is known to reach.
func AptMirror(suite string) (string, error) {
	sources, _ := filepath.Glob("/etc/apt/sources.list.d/*.sources")
	for _, f := range sources {
		if uri := deb822Mirror(f, suite); uri != "" {
			return uri, nil
		}
	}
	lists, _ := filepath.Glob("/etc/apt/sources.list.d/*.list")
	for _, f := range append([]string{"/etc/apt/sources.list"}, lists...) {
		if uri := listMirror(f, suite); uri != "" {
			return uri, nil
		}
	}
	return "", errors.New("no Debian " + suite + " source in apt's sources: give --mirror")
}

// deb822Mirror reads a .sources file's first stanza of Types: deb for
// suite.
func deb822Mirror(path, suite string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	for _, stanza := range strings.Split(string(b), "\n\n") {
		fields := map[string][]string{}
		for _, line := range strings.Split(stanza, "\n") {
			k, v, ok := strings.Cut(line, ":")
			if ok && !strings.HasPrefix(line, "#") {
				fields[strings.TrimSpace(k)] = strings.Fields(v)
			}
		}
		if slices.Contains(fields["Types"], "deb") && slices.Contains(fields["Suites"], suite) && len(fields["URIs"]) > 0 {
			return fields["URIs"][0]
		}
	}
	return ""
}

// listMirror reads a one-line-style list's first deb line for suite.
func listMirror(path, suite string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(sc.Text())
		// deb [options] URI SUITE COMPONENT...
		if len(fields) >= 3 && fields[0] == "deb" {
			fields = fields[1:]
			if strings.HasPrefix(fields[0], "[") {
				for len(fields) > 0 && !strings.HasSuffix(fields[0], "]") {
					fields = fields[1:]
				}
				fields = fields[1:]
			}
			if len(fields) >= 2 && fields[1] == suite {
				return fields[0]
			}
		}
	}
	return ""
}
