package chart

import (
	"fmt"
	"io"
	"strings"
	"time"
)

// Default size of a terminal chart.
const (
	DefaultWidth  = 64
	DefaultHeight = 8
)

var eighths = []rune(" ▁▂▃▄▅▆▇█")

// Terminal writes one column chart per series, all on the same y scale,
// width columns by height rows of Unicode block characters (eighths of a
// row), with the band marked under the x axis:
//
//	baseline   peak 160/s
//	 160 ┤      ▇█████████▆▁
//	     │   ▁▁▁█████████████▁▁▁▁
//	   0 ┼───────────────────────
//	      ━━━━━━━━━ outage
//	     0s                   4m
//
// A width or height of 0 takes the default.
func Terminal(w io.Writer, c Chart, width, height int) {
	if width <= 0 {
		width = DefaultWidth
	}
	if height <= 0 {
		height = DefaultHeight
	}
	ymax := 0.0 // the tallest column is full: the label says its value
	for _, s := range c.Series {
		for _, v := range s.Values {
			ymax = max(ymax, v)
		}
	}
	ymax = max(ymax, 1)
	span := c.span()
	n := int(span / max(c.Step, 1))
	label := FormatNumber(ymax)
	gutter := max(len(label), 1)
	for k, s := range c.Series {
		if k > 0 {
			fmt.Fprintln(w)
		}
		// Every panel has the same x scale: the longest series'.
		values := append(s.Values[:len(s.Values):len(s.Values)], make([]float64, n-len(s.Values))...)
		cols, colDur := columns(values, width, c.Step)
		peak, peakAt := 0.0, 0
		for i, v := range s.Values {
			if v > peak {
				peak, peakAt = v, i
			}
		}
		fmt.Fprintf(w, "%s   peak %s/s at %s\n", s.Name, FormatNumber(peak), FormatDuration(time.Duration(peakAt)*c.Step))
		for r := 0; r < height; r++ {
			var b strings.Builder
			switch r {
			case 0:
				fmt.Fprintf(&b, "%*s ┤", gutter, label)
			default:
				fmt.Fprintf(&b, "%*s │", gutter, "")
			}
			for _, v := range cols {
				level := int(v/ymax*float64(height*8) + 0.5)
				fill := min(max(level-(height-1-r)*8, 0), 8)
				if fill == 0 && r == height-1 && v > 0 {
					fill = 1 // any call at all shows
				}
				b.WriteRune(eighths[fill])
			}
			fmt.Fprintln(w, strings.TrimRight(b.String(), " "))
		}
		fmt.Fprintf(w, "%*s ┼%s\n", gutter, "0", strings.Repeat("─", len(cols)))
		if c.Band != nil && colDur > 0 {
			from := int(c.Band.From / colDur)
			to := max(int((c.Band.To+colDur-1)/colDur), from+1)
			to = min(to, len(cols))
			if from < len(cols) {
				line := strings.Repeat(" ", from) + strings.Repeat("━", to-from) + " " + c.Band.Label
				fmt.Fprintf(w, "%*s  %s\n", gutter, "", line)
			}
		}
		end := FormatDuration(span)
		pad := max(len(cols)-len("0s")-len(end), 1)
		fmt.Fprintf(w, "%*s  0s%s%s\n", gutter, "", strings.Repeat(" ", pad), end)
	}
}

// columns fits values into at most width columns: groups of values are
// averaged; a short series is stretched (each value repeated) to fill at
// least half the width. colDur is the time one column covers.
func columns(values []float64, width int, step time.Duration) (cols []float64, colDur time.Duration) {
	if len(values) == 0 {
		return nil, step
	}
	if len(values) > width {
		cols, per := resample(values, width)
		return cols, time.Duration(per) * step
	}
	rep := max(width/len(values), 1)
	if rep == 1 {
		return values, step
	}
	cols = make([]float64, 0, len(values)*rep)
	for _, v := range values {
		for range rep {
			cols = append(cols, v)
		}
	}
	return cols, step / time.Duration(rep)
}
