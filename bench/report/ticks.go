package report

import (
	"math"
	"strconv"

	"gonum.org/v1/plot"
)

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
