package chart

import (
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"sync"

	"golang.org/x/image/font"
	"golang.org/x/image/font/gofont/goregular"
	"golang.org/x/image/font/opentype"
	"golang.org/x/image/math/fixed"
	"golang.org/x/image/vector"
)

// PNG writes the chart as a PNG image: the SVG's drawing, rasterised with
// anti-aliasing and the Go font.
func PNG(w io.Writer, c Chart) error {
	cv := &pngCanvas{img: image.NewRGBA(image.Rect(0, 0, PlotWidth, PlotHeight))}
	draw(cv, c)
	return png.Encode(w, cv.img)
}

type pngCanvas struct {
	img *image.RGBA
}

func (p *pngCanvas) rect(x, y, w, h float64, fill color.RGBA) {
	p.fill([]point{{x, y}, {x + w, y}, {x + w, y + h}, {x, y + h}}, image.NewUniform(fill))
}

// polyline strokes the line as one quad per segment, rasterised together:
// the quads all wind the same way, so where they overlap coverage adds up
// (to full) and never cancels, and collinear segments join seamlessly. A
// bend sharper than 15° also gets a square cap, wound the same way, so a
// thick line shows no notch there.
func (p *pngCanvas) polyline(pts []point, stroke color.RGBA, width float64) {
	if len(pts) < 2 {
		return
	}
	h := width / 2
	box := p.box(pts, h)
	if box.Empty() {
		return
	}
	// Rasterise the bounding box only, in its own coordinates.
	r := vector.NewRasterizer(box.Dx(), box.Dy())
	ox, oy := float64(box.Min.X), float64(box.Min.Y)
	poly := func(q ...point) {
		r.MoveTo(float32(q[0].x-ox), float32(q[0].y-oy))
		for _, v := range q[1:] {
			r.LineTo(float32(v.x-ox), float32(v.y-oy))
		}
		r.ClosePath()
	}
	var prevX, prevY float64 // the previous segment's unit direction
	for i := 1; i < len(pts); i++ {
		a, b := pts[i-1], pts[i]
		dx, dy := b.x-a.x, b.y-a.y
		l := math.Hypot(dx, dy)
		if l == 0 {
			continue
		}
		ux, uy := dx/l, dy/l
		if i > 1 && width > 1 && math.Abs(prevX*uy-prevY*ux) > math.Sin(15*math.Pi/180) {
			poly(point{a.x - h, a.y + h}, point{a.x + h, a.y + h}, point{a.x + h, a.y - h}, point{a.x - h, a.y - h})
		}
		prevX, prevY = ux, uy
		nx, ny := -uy*h, ux*h
		poly(point{a.x + nx, a.y + ny}, point{b.x + nx, b.y + ny}, point{b.x - nx, b.y - ny}, point{a.x - nx, a.y - ny})
	}
	r.Draw(p.img, box, image.NewUniform(stroke), image.Point{})
}

// fill fills a polygon, rasterising only its bounding box.
func (p *pngCanvas) fill(poly []point, src image.Image) {
	box := p.box(poly, 0)
	if box.Empty() {
		return
	}
	r := vector.NewRasterizer(box.Dx(), box.Dy())
	ox, oy := float64(box.Min.X), float64(box.Min.Y)
	r.MoveTo(float32(poly[0].x-ox), float32(poly[0].y-oy))
	for _, q := range poly[1:] {
		r.LineTo(float32(q.x-ox), float32(q.y-oy))
	}
	r.ClosePath()
	r.Draw(p.img, box, src, image.Point{})
}

// box is the pixels that points pts, widened by pad, can touch, within
// the image.
func (p *pngCanvas) box(pts []point, pad float64) image.Rectangle {
	minX, minY, maxX, maxY := math.Inf(1), math.Inf(1), math.Inf(-1), math.Inf(-1)
	for _, q := range pts {
		minX, minY = min(minX, q.x-pad), min(minY, q.y-pad)
		maxX, maxY = max(maxX, q.x+pad), max(maxY, q.y+pad)
	}
	return image.Rect(int(math.Floor(minX)), int(math.Floor(minY)), int(math.Ceil(maxX))+1, int(math.Ceil(maxY))+1).
		Intersect(p.img.Bounds())
}

func (p *pngCanvas) text(x, y float64, s string, size float64, anchor int, fill color.RGBA) {
	if s == "" {
		return
	}
	face := goFace(size)
	d := font.Drawer{Dst: p.img, Src: image.NewUniform(fill), Face: face}
	adv := d.MeasureString(s)
	var dx fixed.Int26_6
	switch anchor {
	case anchorMiddle:
		dx = adv / 2
	case anchorEnd:
		dx = adv
	}
	d.Dot = fixed.Point26_6{X: fixed.Int26_6(x*64) - dx, Y: fixed.Int26_6(y * 64)}
	d.DrawString(s)
}

var (
	fontOnce sync.Once
	goFont   *opentype.Font
	facesMu  sync.Mutex
	faces    = map[float64]font.Face{}
)

// goFace is the Go font (embedded in golang.org/x/image) at size px.
func goFace(size float64) font.Face {
	fontOnce.Do(func() {
		f, err := opentype.Parse(goregular.TTF)
		if err != nil {
			panic("chart: the embedded Go font does not parse: " + err.Error())
		}
		goFont = f
	})
	facesMu.Lock()
	defer facesMu.Unlock()
	if f, ok := faces[size]; ok {
		return f
	}
	f, err := opentype.NewFace(goFont, &opentype.FaceOptions{Size: size, DPI: 72, Hinting: font.HintingFull})
	if err != nil {
		panic("chart: Go font face: " + err.Error())
	}
	faces[size] = f
	return f
}
