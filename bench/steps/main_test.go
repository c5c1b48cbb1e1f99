package main

import (
	"strings"
	"testing"
)

// TestSummary: each build's cells get the median and range of their rates
// and the median CPU per message, rows in the order asked for, a cell a
// build did not run is a dash, and a line that is not run.sh's is refused
// with its number.
func TestSummary(t *testing.T) {
	lines := `1 new sync 4 30000 10 5
1 old sync 4 15000 20 10
2 new sync 4 34000 8 4
2 old sync 4 17000 30 10
3 new sync 4 31000 9 5
3 old sync 4 16000 25 10
1 new async 16 1200000 0.5 0.25
`
	var out strings.Builder
	if err := summary(&out, strings.NewReader(lines), []string{"old", "new"}); err != nil {
		t.Fatal(err)
	}
	want := `| build | sync 4 | async 16 |
|---|---:|---:|
| old | 16k [15k–17k], 35 µs | — |
| new | 31k [30k–34k], 14 µs | 1.2M [1.2M–1.2M], 0.75 µs |
`
	if out.String() != want {
		t.Errorf("summary:\n%s\nwant:\n%s", out.String(), want)
	}
	if err := summary(&out, strings.NewReader("1 new sync 4 30000 10 5\ndone\n"), nil); err == nil || !strings.Contains(err.Error(), "line 2") {
		t.Errorf("a stray line: %v, want it refused by its number", err)
	}
	if err := summary(&out, strings.NewReader("1 new sync 4 fast 10 5\n"), nil); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("a rate that is not a number: %v", err)
	}
}
