package report

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/mqstore/mqstore/bench/runfile"
)

// TestReferenceRunsRenderAsCommitted: every reference run in results/ of
// schema 4 or later holds the summary.md and bench.txt that the harness
// renders from its run file today (results/README.md promises it), so a
// change to the analysis or the tables shows up here, and the committed
// files are refreshed with `mqbench report` in the same change. The
// schema-3 runs are kept as their day's harness wrote them.
func TestReferenceRunsRenderAsCommitted(t *testing.T) {
	runs, err := filepath.Glob(filepath.Join("..", "..", "results", "*", "run.json.gz"))
	if err != nil {
		t.Fatal(err)
	}
	if len(runs) == 0 {
		t.Fatal("no reference run in results/")
	}
	for _, path := range runs {
		dir := filepath.Dir(path)
		f, err := runfile.Read(dir)
		if err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if f.Schema < 4 {
			continue
		}
		Analyze(f)
		var bench bytes.Buffer
		if err := WriteBenchTxt(&bench, f); err != nil {
			t.Fatal(err)
		}
		for name, got := range map[string][]byte{"summary.md": []byte(Summary(f)), "bench.txt": bench.Bytes()} {
			want, err := os.ReadFile(filepath.Join(dir, name))
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Errorf("%s: %s is not what the harness renders today; run `mqbench report %s`", dir, name, dir)
			}
		}
	}
}
