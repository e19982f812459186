package chart

import (
	"bufio"
	"fmt"
	"html"
	"image/color"
	"io"
	"math"
	"strconv"
	"strings"
)

// SVG writes the chart as a standalone SVG document.
func SVG(w io.Writer, c Chart) error {
	bw := bufio.NewWriter(w)
	fmt.Fprintf(bw, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="Go, Helvetica, Arial, sans-serif">`+"\n",
		PlotWidth, PlotHeight, PlotWidth, PlotHeight)
	draw(&svgCanvas{w: bw}, c)
	fmt.Fprintln(bw, "</svg>")
	return bw.Flush()
}

type svgCanvas struct{ w *bufio.Writer }

func (s *svgCanvas) rect(x, y, w, h float64, fill color.RGBA) {
	fmt.Fprintf(s.w, `<rect x="%s" y="%s" width="%s" height="%s" fill="%s"/>`+"\n", num(x), num(y), num(w), num(h), hex(fill))
}

func (s *svgCanvas) polyline(pts []point, stroke color.RGBA, width float64) {
	if len(pts) < 2 {
		return
	}
	var b strings.Builder
	for i, p := range pts {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(num(p.x))
		b.WriteByte(',')
		b.WriteString(num(p.y))
	}
	fmt.Fprintf(s.w, `<polyline points="%s" fill="none" stroke="%s" stroke-width="%s" stroke-linejoin="round"/>`+"\n",
		b.String(), hex(stroke), num(width))
}

func (s *svgCanvas) text(x, y float64, str string, size float64, anchor int, fill color.RGBA) {
	if str == "" {
		return
	}
	a := "start"
	switch anchor {
	case anchorMiddle:
		a = "middle"
	case anchorEnd:
		a = "end"
	}
	fmt.Fprintf(s.w, `<text x="%s" y="%s" font-size="%s" text-anchor="%s" fill="%s">%s</text>`+"\n",
		num(x), num(y), num(size), a, hex(fill), html.EscapeString(str))
}

// num writes a coordinate with at most one decimal.
func num(v float64) string {
	return strconv.FormatFloat(math.Round(v*10)/10, 'f', -1, 64)
}

func hex(c color.RGBA) string { return fmt.Sprintf("#%02x%02x%02x", c.R, c.G, c.B) }
