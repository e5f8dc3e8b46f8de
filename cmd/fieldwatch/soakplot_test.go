package main

import (
	"fmt"
	"image"
	"image/color"
	"image/draw"
	"image/png"
	"os"
	"slices"
	"time"

	"golang.org/x/image/font"
	"golang.org/x/image/font/basicfont"
	"golang.org/x/image/math/fixed"
)

// soakPlot writes the samples as a PNG to path: one panel per series,
// its name and range written above it, the samples as a line over the
// run's time, and the end of the warm-up as a vertical line.
func soakPlot(path string, names []string, at []time.Duration, values [][]float64, warm time.Duration) error {
	const width, panel, top, margin = 900, 110, 18, 10
	img := image.NewRGBA(image.Rect(0, 0, width, len(names)*(panel+top)))
	draw.Draw(img, img.Bounds(), image.White, image.Point{}, draw.Src)
	grey, blue, red := color.RGBA{200, 200, 200, 255}, color.RGBA{30, 90, 200, 255}, color.RGBA{220, 60, 40, 255}
	end := slices.Max(at)
	if end <= 0 {
		end = time.Second
	}
	x := func(d time.Duration) int { return margin + int(float64(width-2*margin)*float64(d)/float64(end)) }
	for i, name := range names {
		y0 := i*(panel+top) + top
		ys := make([]float64, len(at))
		for k := range at {
			ys[k] = values[k][i]
		}
		lo, hi := slices.Min(ys), slices.Max(ys)
		if hi == lo {
			hi = lo + 1
		}
		y := func(v float64) int { return y0 + panel - 4 - int(float64(panel-8)*(v-lo)/(hi-lo)) }
		text(img, margin, y0-5, fmt.Sprintf("%s: %.0f to %.0f over %s", name, slices.Min(ys), slices.Max(ys), end.Round(time.Second)))
		for px := margin; px < width-margin; px++ {
			img.Set(px, y0+panel-1, grey)
		}
		for py := y0; py < y0+panel; py++ {
			img.Set(x(warm), py, red)
		}
		for k := 1; k < len(at); k++ {
			line(img, x(at[k-1]), y(ys[k-1]), x(at[k]), y(ys[k]), blue)
		}
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := png.Encode(f, img); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

func text(img draw.Image, x, y int, s string) {
	d := font.Drawer{Dst: img, Src: image.Black, Face: basicfont.Face7x13, Dot: fixed.P(x, y)}
	d.DrawString(s)
}

// line draws from (x0, y0) to (x1, y1) (Bresenham).
func line(img draw.Image, x0, y0, x1, y1 int, c color.Color) {
	dx, dy := abs(x1-x0), -abs(y1-y0)
	sx, sy := 1, 1
	if x0 > x1 {
		sx = -1
	}
	if y0 > y1 {
		sy = -1
	}
	for e := dx + dy; ; {
		img.Set(x0, y0, c)
		if x0 == x1 && y0 == y1 {
			return
		}
		e2 := 2 * e
		if e2 >= dy {
			e += dy
			x0 += sx
		}
		if e2 <= dx {
			e += dx
			y0 += sy
		}
	}
}

func abs(n int) int {
	if n < 0 {
		return -n
	}
	return n
}
