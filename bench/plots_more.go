package bench

import (
	"fmt"
	"image/color"
	"math"
	"os"
	"path/filepath"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// pressurePlotCells are the cells drawn as time series: every latency cell
// under pressure, and its unpressured twin.
func pressurePlotCells(f *RunFile) []*Cell {
	var out []*Cell
	for _, row := range pressureRows(f, "latency") {
		if len(row.base.Repeats) > 0 && len(row.base.Repeats[0].Samples) > 0 {
			out = append(out, row.base)
		}
		for _, p := range pressuresRun(f) {
			if c := row.by[p]; c != nil && c.Status == StatusOK && len(c.Repeats) > 0 && len(c.Repeats[0].Samples) > 0 {
				out = append(out, c)
			}
		}
	}
	return out
}

func pressurePlotName(c *Cell) string { return "pressure-" + c.Name + ".png" }

// paretoPlotName names a sweep series' plot.
func paretoPlotName(i int) string { return fmt.Sprintf("pareto-%d.png", i) }

// timeSeriesPlot draws one repeat of a cell: latency per 100 ms (p99 and
// max) above dirty/writeback pages, swap traffic and major faults, and PSI.
func timeSeriesPlot(path string, c *Cell) error {
	rep := c.Repeats[0]
	var t0 int64
	if len(rep.Result.Series) > 0 {
		t0 = rep.Result.Series[0].StartUnixNs
	} else if len(rep.Samples) > 0 {
		t0 = rep.Samples[0].UnixNs
	}
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	mk := func(title, ylabel string) *plot.Plot {
		p := plot.New()
		p.Title.Text, p.Y.Label.Text, p.X.Label.Text = title, ylabel, "seconds into the measured window"
		p.Legend.Top, p.Legend.Left = true, true
		p.Add(plotter.NewGrid())
		return p
	}
	addLine := func(p *plot.Plot, name string, i int, xys plotter.XYs) error {
		if len(xys) == 0 {
			return nil
		}
		l, err := plotter.NewLine(xys)
		if err != nil {
			return err
		}
		l.Color, l.Width = plotutil.Color(i), vg.Points(1.2)
		p.Add(l)
		p.Legend.Add(name, l)
		return nil
	}
	lat := mk(fmt.Sprintf("%s, repeat 1: latency per 100 ms (from intended start)", c.Name), "ms (log)")
	lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	var p99, mx plotter.XYs
	for _, s := range rep.Result.Series {
		if s.Count > 0 {
			x := sec(s.StartUnixNs + s.IntervalNs)
			p99 = append(p99, plotter.XY{X: x, Y: math.Max(float64(s.P99Ns)/1e6, 1e-3)})
			mx = append(mx, plotter.XY{X: x, Y: math.Max(float64(s.MaxNs)/1e6, 1e-3)})
		}
	}
	dirty := mk("page cache: dirty and under writeback", "MiB")
	swap := mk("swap-ins, swap-outs, major faults per 100 ms", "pages / faults")
	psi := mk("pressure stall (share of the 100 ms some task stalled)", "%")
	var nd, nw, si, so, mf, io, mem plotter.XYs
	for _, s := range rep.Samples {
		x := sec(s.UnixNs)
		nd = append(nd, plotter.XY{X: x, Y: float64(s.NrDirtyPages) * 4096 / (1 << 20)})
		nw = append(nw, plotter.XY{X: x, Y: float64(s.NrWritebackPages) * 4096 / (1 << 20)})
		si = append(si, plotter.XY{X: x, Y: float64(s.PswpIn)})
		so = append(so, plotter.XY{X: x, Y: float64(s.PswpOut)})
		mf = append(mf, plotter.XY{X: x, Y: float64(s.PgMajFault)})
		io = append(io, plotter.XY{X: x, Y: float64(s.IOSomeStallUs) / 1e3})    // µs per 100 ms → %
		mem = append(mem, plotter.XY{X: x, Y: float64(s.MemSomeStallUs) / 1e3}) // µs per 100 ms → %
	}
	for _, step := range []struct {
		p    *plot.Plot
		name string
		i    int
		xys  plotter.XYs
	}{{lat, "p99", 0, p99}, {lat, "max", 1, mx}, {dirty, "nr_dirty", 0, nd}, {dirty, "nr_writeback", 1, nw},
		{swap, "pswpin", 0, si}, {swap, "pswpout", 1, so}, {swap, "pgmajfault", 2, mf}, {psi, "io some", 0, io}, {psi, "memory some", 1, mem}} {
		if err := addLine(step.p, step.name, step.i, step.xys); err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
	}
	plots := [][]*plot.Plot{{lat}, {dirty}, {swap}, {psi}}
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, xys := range []plotter.XYs{p99, nd} {
		for _, xy := range xys {
			xmin, xmax = math.Min(xmin, xy.X), math.Max(xmax, xy.X)
		}
	}
	if xmin < xmax {
		for _, row := range plots {
			row[0].X.Min, row[0].X.Max = xmin, xmax // one time axis for all four
		}
	}
	img := vgimg.New(9*vg.Inch, 11*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: 4, Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	out, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	if _, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(out); err != nil {
		out.Close()
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return out.Close()
}

// paretoPlot draws a sweep series: every policy, the front joined and
// labelled.
func paretoPlot(path string, s sweepSeries) error {
	p := plot.New()
	p.Title.Text = "Flush-policy sweep, " + s.key + " (★ Pareto front)"
	p.X.Label.Text, p.Y.Label.Text = "throughput (msgs/s)", "p99.9 latency (ms, log)"
	p.Y.Scale, p.Y.Tick.Marker = plot.LogScale{}, plot.LogTicks{Prec: -1}
	p.Add(plotter.NewGrid())
	var all, front plotter.XYs
	var labels []string
	for _, pt := range s.points {
		all = append(all, plotter.XY{X: pt.MsgsPerSec, Y: math.Max(float64(pt.P999Ns)/1e6, 1e-3)})
	}
	for _, i := range s.front {
		front = append(front, all[i])
		labels = append(labels, s.points[i].Label)
	}
	sc, err := plotter.NewScatter(all)
	if err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	sc.Color = color.Gray{Y: 120}
	p.Add(sc)
	p.Legend.Add("policy", sc)
	if len(front) > 0 {
		line, pts, err := plotter.NewLinePoints(front)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		line.Color, pts.Color, pts.Shape, pts.Radius = plotutil.Color(0), plotutil.Color(0), draw.PyramidGlyph{}, vg.Points(4)
		p.Add(line, pts)
		p.Legend.Add("Pareto front", line, pts)
		lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: front, Labels: labels})
		if err == nil {
			p.Add(lbl)
		}
	}
	if err := p.Save(9*vg.Inch, 6*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

// morePlotNames and writeMorePlots extend PlotNames and WritePlots.
func morePlotNames(f *RunFile) []string {
	var names []string
	for _, c := range pressurePlotCells(f) {
		names = append(names, pressurePlotName(c))
	}
	for i := range sweepOf(f) {
		names = append(names, paretoPlotName(i))
	}
	return names
}

func writeMorePlots(dir string, f *RunFile) error {
	for _, c := range pressurePlotCells(f) {
		if err := timeSeriesPlot(filepath.Join(dir, pressurePlotName(c)), c); err != nil {
			return err
		}
	}
	for i, s := range sweepOf(f) {
		if err := paretoPlot(filepath.Join(dir, paretoPlotName(i)), s); err != nil {
			return err
		}
	}
	return nil
}
