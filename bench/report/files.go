package report

import (
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"

	"github.com/mqstore/mqstore/bench/runfile"
)

// WriteOutputs analyzes the run (Analyze), writes run.json.gz and renders
// everything derived from it into dir.
func WriteOutputs(dir string, f *runfile.RunFile) error {
	Analyze(f)
	if err := runfile.Write(dir, f); err != nil {
		return err
	}
	return Render(dir, f)
}

// Render writes everything derived from the run file: bench.txt, the .hgrm
// files, the plots and summary.md.
func Render(dir string, f *runfile.RunFile) error {
	if err := writeFile(filepath.Join(dir, "bench.txt"), func(w io.Writer) error { return WriteBenchTxt(w, f) }); err != nil {
		return err
	}
	if err := writeHgrms(dir, f); err != nil {
		return err
	}
	if err := WritePlots(dir, f); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "summary.md"), []byte(Summary(f)), 0o644)
}

// Report re-renders a stored run's derived files (summary.md, plots,
// bench.txt, .hgrm) from its run file; a run file of a schema Read does
// not read is refused (runfile.ErrSchema).
func Report(dir string) (*runfile.RunFile, error) {
	f, err := runfile.Read(dir)
	if err != nil {
		return nil, err
	}
	Analyze(f)
	if err := Render(dir, f); err != nil {
		return nil, err
	}
	return f, nil
}

func writeFile(path string, fn func(io.Writer) error) error {
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := fn(out); err != nil {
		out.Close()
		return fmt.Errorf("write %s: %w", path, err)
	}
	return out.Close()
}

// writeHgrms writes <cell>.hgrm: the cell's histogram merged over its
// measured repeats (latency for open-loop cells, delivery for e2e, service
// time for closed-loop ones), values in microseconds.
func writeHgrms(dir string, f *runfile.RunFile) error {
	for _, c := range allCells(f) {
		h := c.MergedHistogram()
		if h == nil || h.Count() == 0 {
			continue
		}
		if err := writeFile(filepath.Join(dir, c.Name+".hgrm"), h.WriteHgrm); err != nil {
			return err
		}
	}
	return nil
}

// DeviceReport renders the device descriptions and the limits (mqbench
// device).
func DeviceReport(f *runfile.RunFile) string {
	var b strings.Builder
	for _, d := range f.Devices {
		fmt.Fprintf(&b, "%s: device %s (%s, %s on %s, mount options %s), model %q, rotational %s, scheduler %q, blocks %d/%d B, write cache %q, FUA %s\n\n",
			d.Dir, d.Device, orDefault(d.Kind, "unknown kind"), d.FSType, d.MountSource, d.MountOptions, d.Model, boolOr(d.Rotational), d.Scheduler,
			d.LogicalBlockBytes, d.PhysicalBlockBytes, d.WriteCache, boolOr(d.FUA))
	}
	writeLimits(&b, f)
	writeFailures(&b, f)
	return b.String()
}
