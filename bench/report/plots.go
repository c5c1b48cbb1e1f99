package report

import (
	"fmt"
	"image/color"
	"io"
	"math"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/mqstore/mqstore/bench/load"
	"github.com/mqstore/mqstore/bench/runfile"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
	"gonum.org/v1/plot/vg/draw"
	"gonum.org/v1/plot/vg/vgimg"
)

// unpressured is the measured cells of a workload and flush without
// pressure (mqstore's and the peers').
func unpressured(f *runfile.RunFile, workload, flush string) []*runfile.Cell {
	return slices.DeleteFunc(allCells(f), func(c *runfile.Cell) bool {
		return c.Workload != workload || c.Flush != flush || c.Pressure != "none" || !c.Measured() || c.Policy != ""
	})
}

func spectrumRates(f *runfile.RunFile, flush string) []float64 {
	rates := distinct(mapped(unpressured(f, "latency", flush), func(c *runfile.Cell) float64 { return c.RatePerSec }))
	sort.Float64s(rates)
	return rates
}

// plotFile is a plot the run has data for: its file name and how to draw it.
type plotFile struct {
	name string
	draw func(path string) error
}

func plotFiles(f *runfile.RunFile) []plotFile {
	var out []plotFile
	for _, fl := range f.Config.Flushes {
		rates := spectrumRates(f, fl)
		for _, rate := range rates {
			out = append(out, plotFile{fmt.Sprintf("latency-%s-r%.0f.png", fl, rate), func(p string) error { return spectrumPlot(p, f, fl, rate) }})
		}
		if len(rates) > 1 { // a curve needs two rates
			out = append(out, plotFile{"latency-vs-rate-" + fl + ".png", func(p string) error { return latencyRatePlot(p, f, fl) }})
		}
		if len(unpressured(f, "throughput", fl)) > 0 {
			out = append(out, plotFile{"throughput-" + fl + ".png", func(p string) error { return throughputPlot(p, f, fl) }})
		}
	}
	for _, c := range pressurePlotCells(f) {
		out = append(out, plotFile{"pressure-" + c.Name + ".png", func(p string) error { return timeSeriesPlot(p, c) }})
	}
	for i, s := range sweepOf(f) {
		out = append(out, plotFile{fmt.Sprintf("pareto-%d.png", i), func(p string) error { return paretoPlot(p, s) }})
	}
	return out
}

// PlotNames lists the plot files the run has data for.
func PlotNames(f *runfile.RunFile) []string {
	return mapped(plotFiles(f), func(p plotFile) string { return p.name })
}

// WritePlots draws every plot PlotNames lists into dir.
func WritePlots(dir string, f *runfile.RunFile) error {
	for _, p := range plotFiles(f) {
		if err := p.draw(filepath.Join(dir, p.name)); err != nil {
			return err
		}
	}
	return nil
}

// percentileTicks label the 1/(1−p) axis with percentiles.
var percentileTicks = plot.ConstantTicks{
	{Value: 1, Label: "0%"}, {Value: 2, Label: "50%"}, {Value: 10, Label: "90%"}, {Value: 100, Label: "99%"},
	{Value: 1e3, Label: "99.9%"}, {Value: 1e4, Label: "99.99%"}, {Value: 1e5, Label: "99.999%"}, {Value: 1e6, Label: "99.9999%"},
}

// nsTicks label an axis in units of nsPer nanoseconds as durations.
func nsTicks(nsPer float64) logTicks {
	return logTicks{format: func(v float64) string { return fmtNs(int64(v * nsPer)) }}
}

func newPlot(title, x, y string) *plot.Plot {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, x, y
	p.Legend.Top, p.Legend.Left = true, true
	return p
}

// sizedLabel is a cell's label with its body size, the plots' legend.
func sizedLabel(f *runfile.RunFile, c *runfile.Cell) string {
	return label(f, c) + " " + runfile.SizeLabel(c.SizeBytes)
}

// us and ms put nanoseconds on a log axis in µs or ms (at least 0.001).
func us(ns float64) float64 { return math.Max(ns/1e3, 0.001) }
func ms(ns float64) float64 { return math.Max(ns/1e6, 1e-3) }

// addXYs adds a line or scatter (newT: plotter.NewLine or NewScatter)
// through xys to p, styled by style and named in the legend; nothing when
// xys is empty.
func addXYs[T interface {
	plot.Plotter
	plot.Thumbnailer
}](p *plot.Plot, name string, xys plotter.XYs, newT func(plotter.XYer) (T, error), style func(T)) error {
	if len(xys) == 0 {
		return nil
	}
	t, err := newT(xys)
	if err != nil {
		return err
	}
	style(t)
	p.Add(t)
	p.Legend.Add(name, t)
	return nil
}

// styleLine gives the i-th series its colour, dashes after the seventh.
func styleLine(line *plotter.Line, i int) {
	line.Color, line.Dashes, line.Width = plotutil.Color(i), plotutil.Dashes(i/7), vg.Points(1.5)
}

// spectrumPlot draws the latency percentile spectrum of every system at
// one rate, the floor's included.
func spectrumPlot(path string, f *runfile.RunFile, flush string, rate float64) error {
	p := newPlot(fmt.Sprintf("Latency by percentile, flush=%s at %s msgs/s (open loop, from the intended start; measured repeats merged)", flush, fmtCount(rate)),
		"percentile", "latency (log)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = percentileTicks, nsTicks(1e3)
	var names []string
	var hists []*load.Histogram
	for _, c := range unpressured(f, "latency", flush) {
		if h := c.MergedHistogram(); c.RatePerSec == rate && h != nil {
			name := sizedLabel(f, c)
			if c.Status == runfile.StatusSaturated {
				name += " (saturated)"
			} else if c.GeneratorBound {
				name += " (generator-bound)"
			}
			names, hists = append(names, name), append(hists, h)
		}
	}
	for _, fl := range f.Floors {
		var hs []*load.Histogram
		for _, r := range fl.Repeats {
			if fl.RatePerSec == rate && fl.Pressure == "none" && !r.Warm && r.Result.Latency != nil {
				hs = append(hs, r.Result.Latency)
			}
		}
		if len(hs) > 0 {
			names, hists = append(names, "floor (no-op)"), append(hists, load.Merged(hs...))
		}
	}
	i := 0
	for k, h := range hists {
		var xys plotter.XYs
		for _, pt := range h.Spectrum(5) {
			if pt.Percentile < 100 {
				xys = append(xys, plotter.XY{X: 1 / (1 - pt.Percentile/100), Y: us(float64(pt.ValueNs))})
			}
		}
		if len(xys) > 0 {
			if err := addXYs(p, names[k], xys, plotter.NewLine, func(l *plotter.Line) { styleLine(l, i) }); err != nil {
				return err
			}
			i++
		}
	}
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// ratePoint is one rung of the p99.9-against-rate plot: the achieved
// rate, the p99.9 of the merged histogram of every measured repeat (the
// figure the tables show) and the lowest and highest p99.9 of a single
// repeat (the whisker).
type ratePoint struct{ x, y, lo, hi float64 }

// rateCurves are the points of the p99.9-against-rate plot: each system's
// unsaturated rungs (in order of first appearance), the saturated rungs
// (their p99.9 a lower bound) and the floor's.
func rateCurves(f *runfile.RunFile, flush string) (order []string, series map[string][]ratePoint, saturated, floor []ratePoint) {
	series = map[string][]ratePoint{}
	for _, c := range unpressured(f, "latency", flush) {
		if c.TwinOf != "" {
			continue
		}
		name := sizedLabel(f, c)
		pt := tailPoint(math.Max(c.MsgsPerSec, 1), c.Tail, c.P999Ns)
		if c.Status == runfile.StatusSaturated {
			saturated = append(saturated, pt)
			continue
		}
		if _, ok := series[name]; !ok {
			order = append(order, name)
		}
		series[name] = append(series[name], pt)
	}
	for _, fl := range f.Floors {
		if fl.Pressure == "none" && fl.Status == runfile.StatusOK {
			floor = append(floor, tailPoint(fl.RatePerSec, fl.Tail, fl.P999Ns))
		}
	}
	for _, xys := range series {
		sort.Slice(xys, func(a, b int) bool { return xys[a].x < xys[b].x })
	}
	sort.Slice(floor, func(a, b int) bool { return floor[a].x < floor[b].x })
	return order, series, saturated, floor
}

// tailPoint is the merged tail's p99.9 at x (µs) with its range over the
// repeats; the median of the repeats' without a tail (a run file without
// histograms).
func tailPoint(x float64, t *runfile.Tail, medianNs int64) ratePoint {
	y := us(float64(tailNs(t, "p999Ns", medianNs)))
	pt := ratePoint{x: x, y: y, lo: y, hi: y}
	if p := t.Point("p999Ns"); p != nil {
		pt.lo, pt.hi = us(float64(p.RepeatMinNs)), us(float64(p.RepeatMaxNs))
	}
	return pt
}

func xys(pts []ratePoint) plotter.XYs {
	return mapped(pts, func(p ratePoint) plotter.XY { return plotter.XY{X: p.x, Y: p.y} })
}

func errorBars(xys plotter.XYs, errs plotter.YErrors) (*plotter.YErrorBars, error) {
	return plotter.NewYErrorBars(struct {
		plotter.XYs
		plotter.YErrors
	}{xys, errs})
}

func latencyRatePlotTitle(flush string) string {
	return fmt.Sprintf("p99.9 against throughput, flush=%s (open loop; × = saturated, a lower bound)\n"+
		"p99.9 of the merged repeats, as in the tables; whiskers: the lowest and highest repeat's", flush)
}

// latencyRatePlot draws each system's p99.9 against the rate it achieved,
// one point per rung (saturated rungs at their achieved rate, their p99.9
// a lower bound), with the floor.
func latencyRatePlot(path string, f *runfile.RunFile, flush string) error {
	p := newPlot(latencyRatePlotTitle(flush), "achieved msgs/s (log)", "p99.9 (log)")
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker, p.Y.Tick.Marker = logTicks{format: fmtCount}, nsTicks(1e3)
	order, series, saturated, floor := rateCurves(f, flush)
	for i, name := range order {
		line, pts, err := plotter.NewLinePoints(xys(series[name]))
		if err != nil {
			return err
		}
		styleLine(line, i)
		pts.Color = line.Color
		w, err := errorBars(xys(series[name]), mapped(series[name], func(p ratePoint) struct{ Low, High float64 } {
			return struct{ Low, High float64 }{math.Max(p.y-p.lo, 0), math.Max(p.hi-p.y, 0)}
		}))
		if err != nil {
			return err
		}
		w.Color = line.Color
		p.Add(line, pts, w)
		p.Legend.Add(name, line, pts)
	}
	if err := addXYs(p, "floor (no-op) p99.9", xys(floor), plotter.NewLine, func(l *plotter.Line) {
		l.Color, l.Dashes = color.Gray{Y: 110}, []vg.Length{vg.Points(4), vg.Points(3)}
	}); err != nil {
		return err
	}
	if err := addXYs(p, "saturated", xys(saturated), plotter.NewScatter, func(sc *plotter.Scatter) {
		sc.Shape, sc.Color = draw.CrossGlyph{}, color.Black
	}); err != nil {
		return err
	}
	p.Add(plotter.NewGrid())
	return p.Save(9*vg.Inch, 5.5*vg.Inch, path)
}

// throughputPlot draws each system's accepted and durable MB/s (best
// producer count), with their intervals.
func throughputPlot(path string, f *runfile.RunFile, flush string) error {
	cells := slices.DeleteFunc(unpressured(f, "throughput", flush), func(c *runfile.Cell) bool { return c.TwinOf != "" })
	names := distinct(mapped(cells, func(c *runfile.Cell) string { return sizedLabel(f, c) }))
	best := map[string]*runfile.Cell{}
	for _, c := range cells {
		name := sizedLabel(f, c)
		if prev := best[name]; prev == nil || c.DurableMBps > prev.DurableMBps || (c.DurableMBps == prev.DurableMBps && c.MBPerSec > prev.MBPerSec) {
			best[name] = c
		}
	}
	p := newPlot(fmt.Sprintf("Throughput, flush=%s (closed loop, best producer count; median, whiskers the interval)", flush), "", "MB/s (records)")
	p.Legend.Left = false
	width := vg.Points(22)
	for k, figure := range []string{"writtenMBps", "durableMBps"} {
		shift := 0.2 * (2*float64(k) - 1)
		vals := make(plotter.Values, len(names))
		errs := make(plotter.YErrors, len(names))
		xys := make(plotter.XYs, len(names))
		for i, name := range names {
			c := best[name]
			iv := c.Interval(figure)
			if figure == "writtenMBps" && c.WrittenMBps == 0 {
				iv = c.Interval("mbPerSec")
			}
			vals[i] = iv.Median
			errs[i].Low, errs[i].High = iv.Median-iv.Lo, iv.Hi-iv.Median
			xys[i] = plotter.XY{X: float64(i) + shift, Y: iv.Median}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return err
		}
		// The pair of bars sits at ±shift in data units, where the
		// whiskers are (an Offset in points would not line up with them).
		bars.Color, bars.XMin = plotutil.Color(k), shift
		p.Add(bars)
		p.Legend.Add(map[string]string{"writtenMBps": "accepted", "durableMBps": "durable"}[figure], bars)
		whiskers, err := errorBars(xys, errs)
		if err != nil {
			return err
		}
		p.Add(whiskers)
	}
	p.NominalX(mapped(names, func(n string) string { return throughputBarLabel(n, best[n]) })...)
	return p.Save(vg.Length(max(9, len(names)))*vg.Inch, 5*vg.Inch, path)
}

// throughputBarLabel names c's pair of bars. A system that reports no
// record bytes (a peer without durability reporting) is drawn with its body
// MB/s, and its label says so: the axis counts records.
func throughputBarLabel(name string, c *runfile.Cell) string {
	if c.WrittenMBps == 0 {
		return name + "\n(body MB/s)"
	}
	return name
}

// pressurePlotCells are the cells drawn as time series: every latency cell
// under pressure, and its unpressured twin.
func pressurePlotCells(f *runfile.RunFile) []*runfile.Cell {
	var out []*runfile.Cell
	for c := range ptrs(f.Cells) {
		if c.Workload != "latency" || c.Pressure == "none" || !c.Measured() || len(firstMeasured(c).Samples) == 0 {
			continue
		}
		for b := range ptrs(f.Cells) {
			if b.Pressure == "none" && samePoint(c, b) && b.Measured() && len(firstMeasured(b).Samples) > 0 {
				out = append(out, b)
			}
		}
		out = append(out, c)
	}
	return firstByKey(out, func(c *runfile.Cell) string { return c.Name })
}

func firstMeasured(c *runfile.Cell) *runfile.Repeat {
	for i := range c.Repeats {
		if !c.Repeats[i].Warm {
			return &c.Repeats[i]
		}
	}
	return &runfile.Repeat{}
}

// timeSeriesPlot draws a cell's first measured repeat: latency per 100 ms
// (p99 and max) above dirty/writeback pages, swap traffic and major faults,
// and PSI, on one time axis.
func timeSeriesPlot(path string, c *runfile.Cell) error {
	rep := firstMeasured(c)
	var t0 int64
	per := "interval"
	if len(rep.Result.Series) > 0 {
		t0, per = rep.Result.Series[0].StartUnixNs, time.Duration(rep.Result.Series[0].IntervalNs).String()
	} else if len(rep.Samples) > 0 {
		t0 = rep.Samples[0].UnixNs
	}
	sec := func(ns int64) float64 { return float64(ns-t0) / 1e9 }
	mk := func(title, ylabel string) *plot.Plot {
		p := newPlot(title, "seconds into the measured window", ylabel)
		p.Add(plotter.NewGrid())
		return p
	}
	lat := mk(fmt.Sprintf("%s, repeat %d: latency per %s (from the intended start)", c.Name, rep.Index, per), "latency (log)")
	lat.Y.Scale, lat.Y.Tick.Marker = plot.LogScale{}, nsTicks(1e6)
	var p99, mx plotter.XYs
	for _, s := range rep.Result.Series {
		if s.Count > 0 {
			x := sec(s.StartUnixNs + s.IntervalNs)
			p99 = append(p99, plotter.XY{X: x, Y: ms(float64(s.P99Ns))})
			mx = append(mx, plotter.XY{X: x, Y: ms(float64(s.MaxNs))})
		}
	}
	dirty := mk("page cache: dirty and under writeback", "MiB")
	swap := mk("swap-ins, swap-outs, major faults per second (over the time since the previous sample)", "pages / faults per s")
	psi := mk("pressure stall (share of the time since the previous sample some task stalled); CPU steal", "%")
	var nd, nw, si, so, mf, steal plotter.XYs
	io, mem := psiShares(rep.Samples)
	for _, xys := range []plotter.XYs{io, mem} {
		for i := range xys {
			xys[i].X = sec(int64(xys[i].X))
		}
	}
	for i, s := range rep.Samples {
		x := sec(s.UnixNs)
		nd = append(nd, plotter.XY{X: x, Y: float64(s.NrDirtyPages) * 4096 / (1 << 20)})
		nw = append(nw, plotter.XY{X: x, Y: float64(s.NrWritebackPages) * 4096 / (1 << 20)})
		if wall := float64(sampleWallNs(rep.Samples, i)) / 1e9; wall > 0 {
			si = append(si, plotter.XY{X: x, Y: float64(s.PswpIn) / wall})
			so = append(so, plotter.XY{X: x, Y: float64(s.PswpOut) / wall})
			mf = append(mf, plotter.XY{X: x, Y: float64(s.PgMajFault) / wall})
		}
		steal = append(steal, plotter.XY{X: x, Y: s.StealPct})
	}
	for _, step := range []struct {
		p    *plot.Plot
		name string
		i    int
		xys  plotter.XYs
	}{{lat, "p99", 0, p99}, {lat, "max", 1, mx}, {dirty, "nr_dirty", 0, nd}, {dirty, "nr_writeback", 1, nw},
		{swap, "pswpin", 0, si}, {swap, "pswpout", 1, so}, {swap, "pgmajfault", 2, mf}, {psi, "io some", 0, io}, {psi, "memory some", 1, mem},
		{psi, "CPU steal", 2, steal}} {
		style := func(l *plotter.Line) { l.Color, l.Width = plotutil.Color(step.i), vg.Points(1.2) }
		if err := addXYs(step.p, step.name, step.xys, plotter.NewLine, style); err != nil {
			return err
		}
	}
	alignX([]*plot.Plot{lat, dirty, swap, psi}, p99, nd)
	return drawColumn(path, []*plot.Plot{lat, dirty, swap, psi})
}

// psiShares are the PSI "some" shares (%) of io and memory at each sample
// (x: its UnixNs): the stall's growth (µs) over the wall time since the
// sample before. A sample that does not record that time (a run file from
// before it was) takes it from the previous sample's time; the first of
// those has none and is left out.
func psiShares(samples []runfile.Sample) (io, mem plotter.XYs) {
	for i, s := range samples {
		if wallNs := sampleWallNs(samples, i); wallNs > 0 {
			io = append(io, plotter.XY{X: float64(s.UnixNs), Y: stallPct(s.IOSomeStallUs, wallNs)})
			mem = append(mem, plotter.XY{X: float64(s.UnixNs), Y: stallPct(s.MemSomeStallUs, wallNs)})
		}
	}
	return io, mem
}

// sampleWallNs is the wall time over which sample i's counts and stalls
// grew: its IntervalNs, or for a run file from before that was recorded the
// time since the sample before (0 for the first: unknown).
func sampleWallNs(samples []runfile.Sample, i int) int64 {
	if ns := samples[i].IntervalNs; ns > 0 {
		return ns
	}
	if i > 0 {
		return samples[i].UnixNs - samples[i-1].UnixNs
	}
	return 0
}

func stallPct(stallUs, wallNs int64) float64 { return 100 * float64(stallUs) * 1e3 / float64(wallNs) }

func alignX(plots []*plot.Plot, series ...plotter.XYs) {
	xmin, xmax := math.Inf(1), math.Inf(-1)
	for _, xys := range series {
		for _, xy := range xys {
			xmin, xmax = math.Min(xmin, xy.X), math.Max(xmax, xy.X)
		}
	}
	if xmin < xmax {
		for _, p := range plots {
			p.X.Min, p.X.Max = xmin, xmax
		}
	}
}

func drawColumn(path string, column []*plot.Plot) error {
	plots := mapped(column, func(p *plot.Plot) []*plot.Plot { return []*plot.Plot{p} })
	img := vgimg.New(9*vg.Inch, 11*vg.Inch)
	dc := draw.New(img)
	tiles := draw.Tiles{Rows: len(plots), Cols: 1, PadY: vg.Points(6), PadTop: vg.Points(4), PadBottom: vg.Points(4)}
	canvases := plot.Align(plots, tiles, dc)
	for i := range plots {
		plots[i][0].Draw(canvases[i][0])
	}
	return writeFile(path, func(w io.Writer) error {
		_, err := (vgimg.PngCanvas{Canvas: img}).WriteTo(w)
		return err
	})
}

// paretoPlot draws a sweep series: every policy, the front's points marked
// and its two ends (most throughput, lowest p99.9) labelled. The front's
// points are not joined: with overlapping intervals a front is a set of
// points no other measurably beats, not a staircase.
func paretoPlot(path string, s sweepSeries) error {
	tail, _, _ := strings.Cut(s.tail, " (")
	p := newPlot("Flush-policy sweep, "+s.key+" (triangles: the Pareto front)", "durable msgs/s", orDefault(tail, "p99.9")+", ms (log)")
	p.Y.Scale, p.Y.Tick.Marker, p.Legend.Left = plot.LogScale{}, nsTicks(1e6), false
	p.Add(plotter.NewGrid())
	all := plotter.XYs(mapped(s.points, func(pt ParetoPoint) plotter.XY { return plotter.XY{X: pt.Thr.Median, Y: ms(pt.P999.Median)} }))
	var front, ends plotter.XYs
	var labels []string
	fastest, lowest := -1, -1
	for _, i := range s.front {
		front = append(front, all[i])
		if fastest < 0 || all[i].X > all[fastest].X {
			fastest = i
		}
		if lowest < 0 || all[i].Y < all[lowest].Y {
			lowest = i
		}
	}
	for _, i := range []int{fastest, lowest} {
		if i >= 0 && (len(ends) == 0 || i != fastest) {
			ends = append(ends, all[i])
			labels = append(labels, s.points[i].Label)
		}
	}
	if err := addXYs(p, "policy", all, plotter.NewScatter, func(sc *plotter.Scatter) { sc.Color = color.Gray{Y: 120} }); err != nil {
		return err
	}
	if err := addXYs(p, "on the Pareto front", front, plotter.NewScatter, func(pts *plotter.Scatter) {
		pts.Color, pts.Shape, pts.Radius = plotutil.Color(0), draw.PyramidGlyph{}, vg.Points(4)
	}); err != nil {
		return err
	}
	if len(front) > 0 {
		if lbl, err := plotter.NewLabels(plotter.XYLabels{XYs: ends, Labels: labels}); err == nil {
			p.Add(lbl)
		}
	}
	return p.Save(9*vg.Inch, 6*vg.Inch, path)
}

// logTicks marks a log axis at every integer multiple of each power of ten
// in its range and labels 1, 2 and 5 × 10^k — or every mark when fewer
// than two of those fall in the range — so an axis spanning less than a
// decade still has labelled ticks (plot.LogTicks labels powers of ten
// only, and leaves such an axis bare).
type logTicks struct {
	// format renders a tick's value (nil: %g).
	format func(float64) string
}

func (t logTicks) Ticks(min, max float64) []plot.Tick {
	if !(min > 0) || !(max > min) {
		return nil
	}
	format := t.format
	if format == nil {
		format = func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	}
	var ticks []plot.Tick
	labelled := 0
	for p := math.Pow10(int(math.Floor(math.Log10(min)))); p <= max; p *= 10 {
		for m := 1; m <= 9; m++ {
			v := p * float64(m)
			if v < min*(1-1e-9) || v > max*(1+1e-9) {
				continue
			}
			tk := plot.Tick{Value: v}
			if m == 1 || m == 2 || m == 5 {
				tk.Label = format(v)
				labelled++
			}
			ticks = append(ticks, tk)
		}
	}
	if labelled < 2 {
		for i := range ticks {
			ticks[i].Label = format(ticks[i].Value)
		}
	}
	if len(ticks) < 2 { // not even two integer multiples inside: the ends
		ticks = []plot.Tick{{Value: min, Label: format(min)}, {Value: max, Label: format(max)}}
	}
	return ticks
}
