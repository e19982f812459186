package ui

import (
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jetfleet/jetfleet/pkg/messages"
)

// Charts are drawn on the server as SVG: the types below hold numbers and
// labels only, and the templates write them into SVG elements, escaped
// like any other text. No chart needs a script or a library.

// segment is one part of a stacked bar (width in percent).
type segment struct {
	X, W  float64
	Class string
	Title string
}

// stackBar is a job's progress as one bar: succeeded, dead-lettered,
// failed, skipped, not run, and in flight (published, no outcome yet).
func stackBar(st *messages.JobStatus) []segment {
	parts := []struct {
		n     int64
		class string
		name  string
	}{
		{st.Succeeded, "ok", "succeeded"},
		{st.DeadLettered, "dlq", "dead-lettered"},
		{st.Failed, "fail", "failed"},
		{st.Skipped, "skip", "skipped"},
		{st.NotRun, "notrun", "not run"},
		{max(st.Published-st.Done(), 0), "flight", "in flight"},
	}
	total := float64(max(st.Items, 1))
	var segs []segment
	x := 0.0
	for _, p := range parts {
		if p.n <= 0 {
			continue
		}
		w := 100 * float64(p.n) / total
		segs = append(segs, segment{X: x, W: w, Class: p.class, Title: fmt.Sprintf("%d %s", p.n, p.name)})
		x += w
	}
	return segs
}

// bar is one bar of a bar chart, in the chart's coordinates.
type bar struct {
	X, Y, W, H float64
	Class      string
	Title      string
}

// tick is a labelled position on an axis; Anchor is its SVG text-anchor
// ("" = middle).
type tick struct {
	X, Y   float64
	Label  string
	Anchor string
}

// anchorEnds keeps the first and last labels of an axis inside the chart.
func anchorEnds(ts []tick) []tick {
	if len(ts) > 1 {
		ts[0].Anchor, ts[len(ts)-1].Anchor = "start", "end"
	}
	return ts
}

// barChart is a chart of width W and height H, in its own coordinates:
// the plot spans Left..Right and Top..Base, the axis labels are below it.
type barChart struct {
	W, H                   float64
	Left, Right, Top, Base float64
	Bars                   []bar
	XTicks                 []tick
	YMax                   string
	Lines                  []polyline
	Empty                  bool
}

// Chart widths, in the chart's coordinates: about the pixels the chart
// takes on a 1280-pixel-wide page, so that its labels stay at font size.
const (
	fullWidth = 1200.0
	wideWidth = 800.0
	halfWidth = 580.0
)

// newChart returns an empty chart w wide.
func newChart(w float64) barChart {
	return barChart{W: w, H: chartH, Left: plotLeft, Right: w - 6, Top: plotTop, Base: plotBottom}
}

// x maps f in [0, 1] to the plot's width.
func (c *barChart) x(f float64) float64 { return c.Left + f*(c.Right-c.Left) }

// y maps v in [0, top] to the plot's height.
func (c *barChart) y(v, top float64) float64 { return c.Base - (c.Base-c.Top)*v/top }

// polyline is a line over a chart.
type polyline struct {
	Points string
	Class  string
}

// Chart geometry (heights; widths vary).
const (
	chartH     = 160.0
	plotTop    = 12.0
	plotBottom = chartH - 18
	plotLeft   = 40.0
	// minLabelGap is the room an x label needs.
	minLabelGap = 44.0
)

// histogram draws counts as bars w wide, labelled by labels (as many as
// fit).
func histogram(w float64, counts []int64, labels []string, class string, titleUnit string) barChart {
	c := newChart(w)
	var top int64
	for _, n := range counts {
		top = max(top, n)
	}
	if top == 0 {
		c.Empty = true
		return c
	}
	c.YMax = strconv.FormatInt(top, 10)
	slot := (c.Right - c.Left) / float64(len(counts))
	every := max(1, int(math.Ceil(minLabelGap/slot)))
	for i, n := range counts {
		y := c.y(float64(n), float64(top))
		x := c.Left + float64(i)*slot
		c.Bars = append(c.Bars, bar{X: x + slot*0.1, Y: y, W: slot * 0.8, H: c.Base - y, Class: class,
			Title: fmt.Sprintf("%s: %d %s", labels[i], n, titleUnit)})
		if i%every == 0 {
			c.XTicks = append(c.XTicks, tick{X: x + slot/2, Y: chartH - 4, Label: labels[i]})
		}
	}
	return c
}

// runsLabels label the runs-per-item histogram.
func runsLabels() []string {
	l := make([]string, maxRuns+1)
	for i := range l {
		l[i] = strconv.Itoa(i)
	}
	l[maxRuns] += "+"
	return l
}

// durationLabels label the duration histogram's buckets by upper bound.
func durationLabels() []string {
	l := make([]string, len(durationBounds)+1)
	for i, d := range durationBounds {
		l[i] = "≤" + shortDuration(d)
	}
	l[len(durationBounds)] = ">" + shortDuration(durationBounds[len(durationBounds)-1])
	return l
}

// timelineChart draws a job's results over time: finished items per bin
// (failed ones apart) and the retries they took as a line.
func timelineChart(v statsView) barChart {
	c := newChart(fullWidth)
	if v.Read == 0 || len(v.Bins) == 0 {
		c.Empty = true
		return c
	}
	last := 0
	var top int64
	for i, b := range v.Bins {
		if b.Done > 0 || b.Retries > 0 {
			last = i
		}
		top = max(top, b.Done, b.Retries)
	}
	bins := v.Bins[:last+1]
	if top == 0 {
		c.Empty = true
		return c
	}
	per := v.Width.Seconds()
	c.YMax = fmt.Sprintf("%s/s", rateText(float64(top)/per))
	slot := (c.Right - c.Left) / float64(len(bins))
	var pts []string
	for i, b := range bins {
		x := c.Left + float64(i)*slot
		hOK := c.Base - c.y(float64(b.Done-b.Failed), float64(top))
		hFail := c.Base - c.y(float64(b.Failed), float64(top))
		from := v.Origin.Add(time.Duration(i) * v.Width)
		title := fmt.Sprintf("%s +%s: %d finished (%d not succeeded), %d retries", from.UTC().Format("15:04:05.0"), shortDuration(v.Width), b.Done, b.Failed, b.Retries)
		c.Bars = append(c.Bars,
			bar{X: x + slot*0.05, Y: c.Base - hOK, W: slot * 0.9, H: hOK, Class: "ok", Title: title},
			bar{X: x + slot*0.05, Y: c.Base - hOK - hFail, W: slot * 0.9, H: hFail, Class: "dlq", Title: title})
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x+slot/2, c.y(float64(b.Retries), float64(top))))
	}
	c.Lines = []polyline{{Points: strings.Join(pts, " "), Class: "retries"}}
	span := time.Duration(len(bins)) * v.Width
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		c.XTicks = append(c.XTicks, tick{X: c.x(f), Y: chartH - 4, Label: "+" + shortDuration(roundSpan(time.Duration(f*float64(span)), span))})
	}
	c.XTicks = anchorEnds(c.XTicks)
	return c
}

// roundSpan rounds d, a point on an axis span long, to a power of ten
// about a hundredth of the span (at least a millisecond), so that labels
// differ without noise digits.
func roundSpan(d, span time.Duration) time.Duration {
	unit := time.Millisecond
	for unit*100 < span && unit < time.Hour {
		unit *= 10
	}
	return d.Round(unit)
}

// rateChart draws the fleet's throughput and retry rate (per second,
// oldest first) over the last len(done)×step.
func rateChart(done, retries []float64, step time.Duration) barChart {
	c := newChart(wideWidth)
	top := 0.0
	for i := range done {
		top = math.Max(top, math.Max(done[i], retries[i]))
	}
	if top == 0 {
		c.Empty = true
	}
	top = math.Max(top, 1)
	c.YMax = rateText(top) + "/s"
	line := func(vals []float64, class string) polyline {
		pts := make([]string, len(vals))
		for i, v := range vals {
			pts[i] = fmt.Sprintf("%.1f,%.1f", c.x(float64(i)/float64(max(len(vals)-1, 1))), c.y(v, top))
		}
		return polyline{Points: strings.Join(pts, " "), Class: class}
	}
	c.Lines = []polyline{line(done, "done"), line(retries, "retries")}
	span := time.Duration(len(done)) * step
	for _, f := range []float64{0, 1.0 / 3, 2.0 / 3, 1} {
		label := "now"
		if f < 1 {
			label = "-" + shortDuration(time.Duration((1-f)*float64(span)).Round(time.Minute))
		}
		c.XTicks = append(c.XTicks, tick{X: c.x(f), Y: chartH - 4, Label: label})
	}
	c.XTicks = anchorEnds(c.XTicks)
	return c
}

// timeline is an item's attempts on a time axis: each run as a bar, each
// backoff delay after it as a thinner bar, generations (replays) apart.
type timeline struct {
	W, H    float64
	Runs    []bar
	Delays  []bar
	Marks   []tick // generation starts (replays)
	XTicks  []tick
	Span    string
	AxisEnd float64
	Empty   bool
}

// attemptTimeline lays out attempts (their Time is when a run ended) up to
// end (when the entry was dead-lettered).
func attemptTimeline(atts []messages.Attempt, end time.Time) timeline {
	t := timeline{W: fullWidth, H: 90}
	if len(atts) == 0 {
		t.Empty = true
		return t
	}
	start := atts[0].Time.Add(-time.Duration(atts[0].DurationMS) * time.Millisecond)
	stop := end
	for _, a := range atts {
		if e := a.Time.Add(time.Duration(a.DelayMS) * time.Millisecond); e.After(stop) {
			stop = e
		}
		if s := a.Time.Add(-time.Duration(a.DurationMS) * time.Millisecond); s.Before(start) {
			start = s
		}
	}
	span := stop.Sub(start)
	if span <= 0 {
		span = time.Millisecond
	}
	const left, right, y, h = 10.0, fullWidth - 10, 30.0, 24.0
	x := func(at time.Time) float64 { return left + (right-left)*float64(at.Sub(start))/float64(span) }
	gen := atts[0].Generation
	for _, a := range atts {
		if a.Generation != gen {
			gen = a.Generation
			t.Marks = append(t.Marks, tick{X: x(a.Time.Add(-time.Duration(a.DurationMS) * time.Millisecond)), Y: y - 6, Label: fmt.Sprintf("replay %d", gen)})
		}
		s := a.Time.Add(-time.Duration(a.DurationMS) * time.Millisecond)
		w := math.Max(x(a.Time)-x(s), 2)
		class := "run " + classToken(a.ErrorClass)
		t.Runs = append(t.Runs, bar{X: x(s), Y: y, W: w, H: h, Class: class,
			Title: fmt.Sprintf("attempt %d of step %d, %s, %s: %s", a.Attempt, a.Step, shortDuration(time.Duration(a.DurationMS)*time.Millisecond), a.ErrorClass, oneLine(a.Message, 200))})
		if a.DelayMS > 0 {
			d := time.Duration(a.DelayMS) * time.Millisecond
			t.Delays = append(t.Delays, bar{X: x(a.Time), Y: y + h/2 - 2, W: math.Max(x(a.Time.Add(d))-x(a.Time), 1), H: 4, Class: "delay",
				Title: fmt.Sprintf("%s: %s", a.Decision, shortDuration(d))})
		}
	}
	t.Span = shortDuration(span.Round(time.Millisecond))
	t.AxisEnd = right
	for _, f := range []float64{0, 0.25, 0.5, 0.75, 1} {
		t.XTicks = append(t.XTicks, tick{X: left + f*(right-left), Y: 84, Label: "+" + shortDuration(roundSpan(time.Duration(f*float64(span)), span))})
	}
	t.XTicks = anchorEnds(t.XTicks)
	return t
}

// classToken is an error class as a CSS class token (the class comes from
// the fleet; only known ones are used).
func classToken(class string) string {
	switch class {
	case "network", "timeout", "server_error", "rate_limit":
		return class
	}
	return "error"
}

// shortDuration prints d compactly: 450ms, 3.2s, 4m10s, 2h5m, 3d4h.
func shortDuration(d time.Duration) string {
	switch {
	case d <= 0:
		return "0s"
	case d < time.Millisecond:
		return "<1ms"
	case d < time.Second:
		return strconv.FormatInt(d.Milliseconds(), 10) + "ms"
	case d < 10*time.Second:
		return strconv.FormatFloat(d.Seconds(), 'f', 1, 64) + "s"
	case d < time.Minute:
		return strconv.Itoa(int(d.Seconds())) + "s"
	case d < time.Hour:
		m, s := int(d.Minutes()), int(d.Seconds())%60
		if s == 0 {
			return fmt.Sprintf("%dm", m)
		}
		return fmt.Sprintf("%dm%ds", m, s)
	case d < 48*time.Hour:
		h, m := int(d.Hours()), int(d.Minutes())%60
		if m == 0 {
			return fmt.Sprintf("%dh", h)
		}
		return fmt.Sprintf("%dh%dm", h, m)
	}
	days, h := int(d.Hours())/24, int(d.Hours())%24
	return fmt.Sprintf("%dd%dh", days, h)
}

// rateText prints a rate with 2-3 significant digits.
func rateText(r float64) string {
	switch {
	case r >= 100:
		return strconv.FormatFloat(r, 'f', 0, 64)
	case r >= 10:
		return strconv.FormatFloat(r, 'f', 1, 64)
	}
	return strconv.FormatFloat(r, 'f', 2, 64)
}

// oneLine collapses whitespace and shortens s to n bytes (on a rune
// boundary).
func oneLine(s string, n int) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) <= n {
		return s
	}
	for n > 0 && !utf8Start(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func utf8Start(b byte) bool { return b&0xC0 != 0x80 }
