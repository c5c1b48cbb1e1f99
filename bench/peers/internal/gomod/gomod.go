// Package gomod reads the module versions a go.mod file requires, for the
// peers' tests that check what the peers report against what the module
// builds them from.
package gomod

import (
	"bufio"
	"fmt"
	"os"
	"strings"
)

// Required returns module path → version for every requirement in the
// go.mod file at path (single-line and block requires alike).
func Required(path string) (map[string]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("read the required versions: %w", err)
	}
	defer f.Close()
	versions := map[string]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		fields := strings.Fields(strings.TrimPrefix(strings.TrimSpace(sc.Text()), "require "))
		if len(fields) >= 2 && strings.HasPrefix(fields[1], "v") {
			versions[fields[0]] = fields[1]
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read %s: %w", path, err)
	}
	return versions, nil
}
