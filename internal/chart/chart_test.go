package chart

import (
	"bytes"
	"encoding/xml"
	"image"
	"image/color"
	"image/png"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sample() Chart {
	base := make([]float64, 120)
	variant := make([]float64, 120)
	for i := range base {
		base[i], variant[i] = 100, 100
		if i >= 30 && i < 60 {
			base[i], variant[i] = 400, 150
		}
	}
	return Chart{
		Title: "calls to the dependency", YLabel: "calls/s", XLabel: "time since the job started",
		Step:   time.Second,
		Series: []Series{{Name: "baseline", Values: base}, {Name: "retry_budget=10%", Values: variant}},
		Band:   &Band{From: 30 * time.Second, To: time.Minute, Label: "outage"},
	}
}

func TestTerminal(t *testing.T) {
	var b bytes.Buffer
	c := Chart{Step: time.Second, Series: []Series{{Name: "run", Values: []float64{0, 2, 4, 4, 2, 0, 1, 1}}},
		Band: &Band{From: time.Second, To: 4 * time.Second, Label: "outage"}}
	Terminal(&b, c, 16, 4)
	want := `run   peak 4/s at 2s
4 ┤    ████
  │    ████
  │  ████████
  │  ████████  ████
0 ┼────────────────
     ━━━━━━ outage
   0s            8s
`
	require.Equal(t, want, b.String())
}

func TestTerminalLongSeriesIsAveraged(t *testing.T) {
	var b bytes.Buffer
	Terminal(&b, sample(), 40, 6)
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	require.Equal(t, "baseline   peak 400/s at 30s", lines[0])
	require.Equal(t, "  0 ┼"+strings.Repeat("─", 40), lines[7], "120 values averaged 3 to a column")
	require.Equal(t, "               ━━━━━━━━━━ outage", lines[8], "the band under columns 10..19")
	require.Contains(t, b.String(), "retry_budget=10%   peak 150/s at 30s")
}

func TestSVGIsWellFormed(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, SVG(&b, sample()))
	dec := xml.NewDecoder(&b)
	elems := map[string]int{}
	var texts []string
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		switch v := tok.(type) {
		case xml.StartElement:
			elems[v.Name.Local]++
		case xml.CharData:
			if s := strings.TrimSpace(string(v)); s != "" {
				texts = append(texts, s)
			}
		}
	}
	require.Equal(t, 1, elems["svg"])
	require.GreaterOrEqual(t, elems["polyline"], 2+6+1, "two series, the grid, the axes")
	require.Contains(t, texts, "outage")
	require.Contains(t, texts, "retry_budget=10%")
	require.Contains(t, texts, "1m")
	require.Contains(t, texts, "400")
	c := sample()
	top, step := c.yAxis()
	require.Equal(t, 500.0, top, "400 and headroom, in steps of 100")
	require.Equal(t, 100.0, step)
}

func TestPNGDrawsTheSameChart(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, PNG(&b, sample()))
	img, err := png.Decode(&b)
	require.NoError(t, err)
	require.Equal(t, image.Rect(0, 0, PlotWidth, PlotHeight), img.Bounds())
	// Inside the band, away from lines and text: the band's colour.
	x := marginLeft + (PlotWidth-marginLeft-marginRight)*45/120
	y := marginTop + 40
	require.Equal(t, colBand, rgba(img.At(x, y)))
	// Both series are drawn in their colours.
	seen := map[color.RGBA]bool{}
	for yy := 0; yy < PlotHeight; yy++ {
		for xx := 0; xx < PlotWidth; xx++ {
			seen[rgba(img.At(xx, yy))] = true
		}
	}
	require.True(t, seen[seriesColor(0)])
	require.True(t, seen[seriesColor(1)])
	require.True(t, seen[colText], "text is drawn")
}

func rgba(c color.Color) color.RGBA {
	r, g, b, a := c.RGBA()
	return color.RGBA{uint8(r >> 8), uint8(g >> 8), uint8(b >> 8), uint8(a >> 8)}
}

func TestFormats(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 750 * time.Millisecond: "750ms", 30 * time.Second: "30s", 1500 * time.Millisecond: "1.5s",
		150 * time.Second: "2m30s", 2 * time.Minute: "2m", 65 * time.Minute: "1h5m", 3 * time.Hour: "3h",
	} {
		require.Equal(t, want, FormatDuration(d), d.String())
	}
	for v, want := range map[float64]string{0: "0", 12: "12", 3.46: "3.5", 250.4: "250", 12345: "12.3k", 3e6: "3M"} {
		require.Equal(t, want, FormatNumber(v))
	}
	for n, want := range map[int64]string{0: "0", 999: "999", 1000: "1,000", -1234567: "-1,234,567", 123456: "123,456", math.MinInt64: "-9,223,372,036,854,775,808"} {
		require.Equal(t, want, FormatCount(n, ","))
	}
	require.Equal(t, "12\u202f345", FormatCount(12345, "\u202f"))
	for v, want := range map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 3: 5, 160: 200, 401: 500, 2100: 2500} {
		require.Equal(t, want, niceCeil(v), "%v", v)
	}
	require.Equal(t, []time.Duration{0, 30 * time.Second, time.Minute, 90 * time.Second, 2 * time.Minute}, timeTicks(2*time.Minute, 5))
}
