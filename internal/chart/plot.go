package chart

import (
	"image/color"
	"time"
)

// Size of an SVG or PNG chart, in pixels.
const (
	PlotWidth  = 880
	PlotHeight = 420
)

// Plot margins around the plotting area.
const (
	marginLeft   = 72
	marginRight  = 24
	marginTop    = 44
	marginBottom = 78
)

// maxPoints bounds the points of one plotted line: longer series are
// averaged down (one point per two pixels).
const maxPoints = (PlotWidth - marginLeft - marginRight) / 2

// Colours of the series, in order, and of the rest of the drawing.
var (
	palette = []color.RGBA{
		{0x1f, 0x77, 0xb4, 0xff}, // blue
		{0xd6, 0x27, 0x28, 0xff}, // red
		{0x2c, 0xa0, 0x2c, 0xff}, // green
		{0xff, 0x7f, 0x0e, 0xff}, // orange
		{0x94, 0x67, 0xbd, 0xff}, // purple
		{0x8c, 0x56, 0x4b, 0xff}, // brown
	}
	colBackground = color.RGBA{0xff, 0xff, 0xff, 0xff}
	colBand       = color.RGBA{0xfb, 0xe3, 0xe4, 0xff}
	colBandText   = color.RGBA{0xa9, 0x44, 0x42, 0xff}
	colGrid       = color.RGBA{0xe3, 0xe3, 0xe3, 0xff}
	colAxis       = color.RGBA{0x44, 0x44, 0x44, 0xff}
	colText       = color.RGBA{0x22, 0x22, 0x22, 0xff}
)

// Text anchors.
const (
	anchorStart = iota
	anchorMiddle
	anchorEnd
)

type point struct{ x, y float64 }

// canvas is what a chart is drawn on: the SVG writer and the PNG
// rasteriser implement it, so both draw the same picture.
type canvas interface {
	rect(x, y, w, h float64, fill color.RGBA)
	polyline(pts []point, stroke color.RGBA, width float64)
	text(x, y float64, s string, size float64, anchor int, fill color.RGBA)
}

// seriesColor is the colour of series i.
func seriesColor(i int) color.RGBA { return palette[i%len(palette)] }

// draw lays the chart out on cv: title, shaded band, grid and ticks,
// axis labels, one line per series and the legend.
func draw(cv canvas, c Chart) {
	x0, x1 := float64(marginLeft), float64(PlotWidth-marginRight)
	y0, y1 := float64(marginTop), float64(PlotHeight-marginBottom)
	cv.rect(0, 0, PlotWidth, PlotHeight, colBackground)
	cv.text(x0, 26, c.Title, 15, anchorStart, colText)

	span := c.span()
	if span <= 0 {
		span = c.Step
	}
	ymax, ystep := c.yAxis()
	xAt := func(t time.Duration) float64 { return x0 + (x1-x0)*float64(t)/float64(span) }
	yAt := func(v float64) float64 { return y1 - (y1-y0)*v/ymax }

	if b := c.Band; b != nil && b.To > b.From && b.From < span {
		bx0, bx1 := xAt(b.From), xAt(min(b.To, span))
		cv.rect(bx0, y0, bx1-bx0, y1-y0, colBand)
		cv.text((bx0+bx1)/2, y0+14, b.Label, 12, anchorMiddle, colBandText)
	}
	for i := 0; float64(i)*ystep <= ymax*(1+1e-9); i++ {
		v := float64(i) * ystep
		y := yAt(v)
		cv.polyline([]point{{x0, y}, {x1, y}}, colGrid, 1)
		cv.text(x0-8, y+4, FormatNumber(v), 12, anchorEnd, colText)
	}
	for _, t := range timeTicks(span, 10) {
		x := xAt(t)
		cv.polyline([]point{{x, y1}, {x, y1 + 5}}, colAxis, 1)
		cv.text(x, y1+19, FormatDuration(t), 12, anchorMiddle, colText)
	}
	cv.polyline([]point{{x0, y0}, {x0, y1}, {x1, y1}}, colAxis, 1)
	cv.text(x0-56, y0-10, c.YLabel, 12, anchorStart, colText)
	cv.text((x0+x1)/2, y1+38, c.XLabel, 12, anchorMiddle, colText)

	for i, s := range c.Series {
		values, group := resample(s.Values, maxPoints)
		w := time.Duration(group) * c.Step
		pts := make([]point, len(values))
		for j, v := range values {
			// A point at the middle of the span it averages.
			pts[j] = point{xAt(time.Duration(j)*w + w/2), yAt(v)}
		}
		cv.polyline(pts, seriesColor(i), 2)
	}

	// The legend: a swatch and a name per series, in a row.
	lx, ly := x0, float64(PlotHeight-14)
	for i, s := range c.Series {
		cv.rect(lx, ly-9, 18, 4, seriesColor(i))
		cv.text(lx+24, ly-3, s.Name, 12, anchorStart, colText)
		lx += 24 + textWidth(s.Name, 12) + 24
	}
}

// textWidth estimates the width of s in the Go font at size px (about
// 0.55 em per character), for laying out the legend.
func textWidth(s string, size float64) float64 {
	return float64(len([]rune(s))) * size * 0.55
}
