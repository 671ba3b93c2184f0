package report

import "image/color"

// The Okabe-Ito colour-blind-safe palette (M. Okabe and K. Ito, "Color Universal
// Design", 2008), the one palette of every figure: the report's (plots.go) and
// the policy study's (Palette).
var (
	vermillion    = color.RGBA{R: 213, G: 94, B: 0, A: 255}
	reddishPurple = color.RGBA{R: 204, G: 121, B: 167, A: 255}
	blue          = color.RGBA{R: 0, G: 114, B: 178, A: 255}
	bluishGreen   = color.RGBA{R: 0, G: 158, B: 115, A: 255}
	black         = color.RGBA{R: 0, G: 0, B: 0, A: 255}
	orange        = color.RGBA{R: 230, G: 159, B: 0, A: 255}
	skyBlue       = color.RGBA{R: 86, G: 180, B: 233, A: 255}
	yellow        = color.RGBA{R: 240, G: 228, B: 66, A: 255}
)

// palette orders the Okabe-Ito colours for series of equal standing (the
// study's arms); the report's variants take theirs by affinity (variantColours).
var palette = []color.RGBA{vermillion, reddishPurple, blue, bluishGreen, black, orange, skyBlue, yellow}

// Palette returns the colour of the i-th series (0-based) among series of equal
// standing, cycling through the Okabe-Ito palette's eight colours.
func Palette(i int) color.RGBA { return palette[i%len(palette)] }
