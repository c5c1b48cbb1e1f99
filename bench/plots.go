package bench

import (
	"fmt"
	"math"
	"path/filepath"
	"slices"

	"github.com/mqstore/mqstore/bench/load"
	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/plotutil"
	"gonum.org/v1/plot/vg"
)

// mergedHistogram merges a cell's repeats: latency for open-loop cells,
// service time for closed-loop ones. Nil when the cell has none.
func mergedHistogram(c *Cell) *load.Histogram {
	var hs []*load.Histogram
	for i := range c.Repeats {
		r := &c.Repeats[i]
		if r.Status != StatusOK {
			continue
		}
		h := r.Result.Service
		switch c.Workload {
		case string(load.Latency):
			h = r.Result.Latency
		case "e2e":
			h = r.Result.Delivery
		}
		if h != nil {
			hs = append(hs, h)
		}
	}
	if len(hs) == 0 {
		return nil
	}
	return load.Merged(hs...)
}

// flushesOf lists the flush modes of ok cells of a workload, in config order.
func flushesOf(f *RunFile, workload string) []string {
	var out []string
	for _, fl := range f.Config.Flushes {
		for _, cells := range [][]Cell{f.Cells, f.Peers} {
			for _, c := range cells {
				if c.Workload == workload && c.Flush == fl && c.Status == StatusOK && !slices.Contains(out, fl) {
					out = append(out, fl)
				}
			}
		}
	}
	return out
}

// PlotNames lists the plot files the run has data for.
func PlotNames(f *RunFile) []string {
	var names []string
	for _, fl := range flushesOf(f, string(load.Latency)) {
		names = append(names, "latency-"+fl+".png")
	}
	for _, fl := range flushesOf(f, string(load.Throughput)) {
		names = append(names, "throughput-"+fl+".png")
	}
	return append(names, morePlotNames(f)...)
}

// WritePlots draws the latency percentile spectra (HdrHistogram's log axis)
// and the throughput bars per flush mode.
func WritePlots(dir string, f *RunFile) error {
	for _, fl := range flushesOf(f, string(load.Latency)) {
		if err := spectrumPlot(filepath.Join(dir, "latency-"+fl+".png"), f, fl); err != nil {
			return err
		}
	}
	for _, fl := range flushesOf(f, string(load.Throughput)) {
		if err := throughputPlot(filepath.Join(dir, "throughput-"+fl+".png"), f, fl); err != nil {
			return err
		}
	}
	return writeMorePlots(dir, f)
}

// percentileTicks label the 1/(1−p) axis with percentiles.
var percentileTicks = plot.ConstantTicks{
	{Value: 1, Label: "0%"}, {Value: 2, Label: "50%"}, {Value: 10, Label: "90%"}, {Value: 100, Label: "99%"},
	{Value: 1e3, Label: "99.9%"}, {Value: 1e4, Label: "99.99%"}, {Value: 1e5, Label: "99.999%"}, {Value: 1e6, Label: "99.9999%"},
}

func spectrumPlot(path string, f *RunFile, flush string) error {
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Latency by percentile, flush=%s (open loop, from intended start; repeats merged)", flush)
	p.X.Label.Text = "percentile"
	p.Y.Label.Text = "latency (µs, log)"
	p.X.Scale, p.Y.Scale = plot.LogScale{}, plot.LogScale{}
	p.X.Tick.Marker = percentileTicks
	p.Y.Tick.Marker = plot.LogTicks{Prec: -1}
	p.Legend.Top, p.Legend.Left = true, true
	i := 0
	for _, cells := range [][]Cell{f.Cells, f.Peers} {
		for k := range cells {
			c := &cells[k]
			if c.Workload != string(load.Latency) || c.Flush != flush || c.Status != StatusOK {
				continue
			}
			h := mergedHistogram(c)
			if h == nil {
				continue
			}
			var xys plotter.XYs
			for _, pt := range h.Spectrum(5) {
				if pt.Percentile >= 100 {
					continue // 1/(1−p) is infinite
				}
				xys = append(xys, plotter.XY{X: 1 / (1 - pt.Percentile/100), Y: math.Max(float64(pt.ValueNs)/1e3, 0.001)})
			}
			if len(xys) == 0 {
				continue
			}
			line, err := plotter.NewLine(xys)
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			line.Color = plotutil.Color(i)
			line.Dashes = plotutil.Dashes(i / 7)
			line.Width = vg.Points(1.5)
			p.Add(line)
			p.Legend.Add(fmt.Sprintf("%s %s", backendLabel(f, c), sizeLabel(c.SizeBytes)), line)
			i++
		}
	}
	p.Add(plotter.NewGrid())
	if err := p.Save(9*vg.Inch, 5.5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}

func throughputPlot(path string, f *RunFile, flush string) error {
	var names []string
	for _, cells := range [][]Cell{f.Cells, f.Peers} {
		for _, c := range cells {
			if c.Workload == string(load.Throughput) && c.Flush == flush && c.Status == StatusOK && !slices.Contains(names, backendLabel(f, &c)) {
				names = append(names, backendLabel(f, &c))
			}
		}
	}
	p := plot.New()
	p.Title.Text = fmt.Sprintf("Throughput, flush=%s (closed loop, %d producers; median, whiskers min–max)", flush, f.Config.Producers)
	p.Y.Label.Text = "MB/s (payload)"
	p.Legend.Top = true
	width := vg.Points(60 / float64(max(1, len(f.Config.Sizes))))
	for si, size := range f.Config.Sizes {
		vals := make(plotter.Values, len(names))
		var errs plotter.YErrors
		for ni, name := range names {
			errs = append(errs, struct{ Low, High float64 }{})
			for _, cells := range [][]Cell{f.Cells, f.Peers} {
				for _, c := range cells {
					if c.Workload == string(load.Throughput) && c.Flush == flush && c.Status == StatusOK && c.SizeBytes == size && backendLabel(f, &c) == name {
						vals[ni] = c.MBPerSec
						errs[ni].Low, errs[ni].High = c.MBPerSec-c.Min.MBPerSec, c.Max.MBPerSec-c.MBPerSec
					}
				}
			}
		}
		bars, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return fmt.Errorf("plot %s: %w", path, err)
		}
		bars.Color = plotutil.Color(si)
		bars.Offset = width * vg.Length(float64(si)-float64(len(f.Config.Sizes)-1)/2)
		p.Add(bars)
		p.Legend.Add(sizeLabel(size), bars)
		if len(f.Config.Sizes) == 1 { // whiskers sit at the nominal x: exact for one bar per name
			xys := make(plotter.XYs, len(vals))
			for i, v := range vals {
				xys[i] = plotter.XY{X: float64(i), Y: v}
			}
			whiskers, err := plotter.NewYErrorBars(struct {
				plotter.XYs
				plotter.YErrors
			}{xys, errs})
			if err != nil {
				return fmt.Errorf("plot %s: %w", path, err)
			}
			p.Add(whiskers)
		}
	}
	p.NominalX(names...)
	if err := p.Save(9*vg.Inch, 5*vg.Inch, path); err != nil {
		return fmt.Errorf("plot %s: %w", path, err)
	}
	return nil
}
