// Package chart draws time series — one value per fixed-width bucket of
// time, such as calls per second — in a terminal (Unicode block
// characters) and as SVG or PNG line charts with a shaded band (an outage)
// and a legend. It is what `fleetctl simulate` plots with.
//
// The SVG is written by hand (small, text, diffable: the docs commit it)
// and the PNG is the same drawing rasterised with golang.org/x/image (an
// anti-aliased path rasteriser and the Go font), so both files show the
// same chart.
package chart

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"
)

// Chart is what to draw. Every series shares the x axis: value i covers
// [i·Step, (i+1)·Step).
type Chart struct {
	Title  string
	YLabel string
	XLabel string
	// Step is the width of one value.
	Step time.Duration
	// Series are drawn in order, each in its own colour.
	Series []Series
	// Band, when set, is shaded behind the series and labelled.
	Band *Band
}

// Series is one named line.
type Series struct {
	Name   string
	Values []float64
}

// Band is a shaded span of the x axis.
type Band struct {
	From, To time.Duration
	Label    string
}

// span is the chart's time span: the longest series.
func (c *Chart) span() time.Duration {
	n := 0
	for _, s := range c.Series {
		n = max(n, len(s.Values))
	}
	return time.Duration(n) * c.Step
}

// yAxis is the y axis of the plot: the top, a few percent above the
// largest value of any series, and the tick step, a nice number (1, 2,
// 2.5 or 5 × 10^k) giving about five ticks.
func (c *Chart) yAxis() (top, step float64) {
	m := 0.0
	for _, s := range c.Series {
		for _, v := range s.Values {
			m = max(m, v)
		}
	}
	m = max(m, 1) * 1.06 // headroom: a line at the peak stays off the frame
	step = niceCeil(m / 5)
	return math.Ceil(m/step) * step, step
}

// resample averages values into at most n points; each point covers
// group values.
func resample(values []float64, n int) (out []float64, group int) {
	if n <= 0 || len(values) <= n {
		return values, 1
	}
	group = (len(values) + n - 1) / n
	out = make([]float64, 0, n)
	for i := 0; i < len(values); i += group {
		sum, k := 0.0, 0
		for j := i; j < len(values) && j < i+group; j++ {
			sum += values[j]
			k++
		}
		out = append(out, sum/float64(k))
	}
	return out, group
}

// niceCeil is the smallest of 1, 2, 2.5, 5 × 10^k at or above v.
func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v*(1-1e-9) {
			return m * p
		}
	}
	return 10 * p
}

// timeTicks are the tick times of an axis of the given span: a step of
// 1, 2, 5, 10, 15, 30 of a unit, giving at most about n ticks.
func timeTicks(span time.Duration, n int) []time.Duration {
	steps := []time.Duration{
		time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond, 10 * time.Millisecond,
		20 * time.Millisecond, 50 * time.Millisecond, 100 * time.Millisecond, 200 * time.Millisecond,
		500 * time.Millisecond, time.Second, 2 * time.Second, 5 * time.Second, 10 * time.Second,
		15 * time.Second, 30 * time.Second, time.Minute, 2 * time.Minute, 5 * time.Minute,
		10 * time.Minute, 15 * time.Minute, 30 * time.Minute, time.Hour, 2 * time.Hour, 6 * time.Hour,
		12 * time.Hour, 24 * time.Hour, 48 * time.Hour, 7 * 24 * time.Hour,
	}
	step := steps[len(steps)-1]
	for _, s := range steps {
		if span/s <= time.Duration(n) {
			step = s
			break
		}
	}
	var out []time.Duration
	for t := time.Duration(0); t <= span; t += step {
		out = append(out, t)
	}
	return out
}

// FormatCount writes n with sep between groups of three digits:
// FormatCount(-1234567, ",") is "-1,234,567".
func FormatCount(n int64, sep string) string {
	s := strconv.FormatInt(n, 10)
	digits := strings.TrimPrefix(s, "-")
	var b strings.Builder
	b.WriteString(s[:len(s)-len(digits)])
	for i, r := range digits {
		if i > 0 && (len(digits)-i)%3 == 0 {
			b.WriteString(sep)
		}
		b.WriteRune(r)
	}
	return b.String()
}

// FormatDuration writes d briefly: "0s", "750ms", "30s", "2m30s", "1h5m".
func FormatDuration(d time.Duration) string {
	switch {
	case d == 0:
		return "0s"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < time.Minute:
		return strconv.FormatFloat(d.Round(100*time.Millisecond).Seconds(), 'f', -1, 64) + "s"
	case d < time.Hour:
		d = d.Round(time.Second)
		if s := d % time.Minute; s != 0 {
			return fmt.Sprintf("%dm%ds", d/time.Minute, s/time.Second)
		}
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	d = d.Round(time.Minute)
	if m := d % time.Hour; m != 0 {
		return fmt.Sprintf("%dh%dm", d/time.Hour, m/time.Minute)
	}
	return fmt.Sprintf("%dh", d/time.Hour)
}

// FormatNumber writes v briefly: "0", "12", "3.5", "1.2k", "3M".
func FormatNumber(v float64) string {
	a := math.Abs(v)
	switch {
	case a >= 1e6:
		return trim(v/1e6) + "M"
	case a >= 1e4:
		return trim(v/1e3) + "k"
	case a >= 100 || a == math.Trunc(a):
		return strconv.FormatFloat(math.Round(v), 'f', -1, 64)
	}
	return trim(v)
}

func trim(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}
