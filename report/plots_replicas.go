package report

import (
	"cmp"
	"math"
	"slices"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// replicaNames returns the replica names seen in turns and series, in manifest
// order first, then sorted.
func replicaNames(run *Run) []string {
	seen := make(map[string]bool)
	var extra []string
	add := func(n string) {
		if n != "" && !seen[n] {
			seen[n] = true
			extra = append(extra, n)
		}
	}
	for _, r := range run.Results {
		add(r.Replica)
	}
	for _, s := range run.Series {
		add(s.Replica)
	}
	var out []string
	for _, n := range run.Manifest.Replicas {
		if seen[n] {
			out = append(out, n)
			delete(seen, n)
		}
	}
	extra = slices.DeleteFunc(extra, func(n string) bool { return !seen[n] })
	slices.Sort(extra)
	return append(out, extra...)
}

// replicaRequestsFigure draws, per variant, stacked bars per replica: first
// turns, later turns that stayed, later turns that moved in. Panels share the y
// range so variants compare at a glance.
func replicaRequestsFigure(run *Run) ([]byte, error) {
	m := &run.Manifest
	names := replicaNames(run)
	if len(m.Variants) == 0 {
		return renderPNG(newPlot("Requests per replica (no variants)", "replica", "turns"))
	}
	colours := variantColours(m)
	row := make([]*plot.Plot, len(m.Variants))
	top := 1.0
	var tops []plotter.XYs
	for i, v := range m.Variants {
		p := newPlot("Turns per replica, "+variantLabel(v), "replica", "turns (whole variant)")
		counts := CountReplicaTurns(run.Results, v.Name)
		var heights plotter.XYs
		if len(names) > 0 {
			var placed, stayed, moved plotter.Values
			for k, n := range names {
				c := counts[n]
				placed = append(placed, float64(c.Placed))
				stayed = append(stayed, float64(c.Stayed))
				moved = append(moved, float64(c.MovedIn+c.Unknown))
				total := float64(c.Placed + c.Stayed + c.MovedIn + c.Unknown)
				top = max(top, total)
				heights = append(heights, plotter.XY{X: float64(k) - 0.3, Y: total}, plotter.XY{X: float64(k) + 0.3, Y: total})
			}
			width := vg.Points(min(40, 200/float64(len(names))))
			bp, err := plotter.NewBarChart(placed, width)
			if err != nil {
				return nil, err
			}
			bs, err := plotter.NewBarChart(stayed, width)
			if err != nil {
				return nil, err
			}
			bm, err := plotter.NewBarChart(moved, width)
			if err != nil {
				return nil, err
			}
			bp.Color, bs.Color, bm.Color = colourPlaced, colours[v.Name], colourMoved
			for _, b := range []*plotter.BarChart{bp, bs, bm} {
				b.LineStyle.Width = 0
			}
			bs.StackOn(bp)
			bm.StackOn(bs)
			p.Add(bp, bs, bm)
			p.Legend.Add("first turn (placed)", bp)
			p.Legend.Add("later turn, stayed", bs)
			p.Legend.Add("later turn, moved in", bm)
			p.NominalX(names...)
			p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
		}
		tops = append(tops, heights)
		row[i] = p
	}
	for i, p := range row {
		p.Y.Min, p.Y.Max = 0, top
		placeLegend(p, []curve{{pts: tops[i], filled: true}}, 3, len("later turn, moved in"), replicaPanelW, figHeight)
	}
	// Headroom may differ per panel; keep the panels on one scale.
	maxY := 0.0
	for _, p := range row {
		maxY = max(maxY, p.Y.Max)
	}
	for _, p := range row {
		p.Y.Max = maxY
	}
	return renderTiles([][]*plot.Plot{row}, vg.Length(len(row))*replicaPanelW, figHeight)
}

// replicaHitsFigure draws grouped bars: per replica, one bar per variant, the
// hit rate in percent that hits gives for a variant's name (ReplicaHitsPct,
// or replicaUsagePct), under title and yLabel.
func replicaHitsFigure(run *Run, title, yLabel string, hits func(variant string) map[string]float64) (*plot.Plot, error) {
	m := &run.Manifest
	colours := variantColours(m)
	p := newPlot(title, "replica", yLabel)
	names := replicaNames(run)
	if len(names) == 0 || len(m.Variants) == 0 {
		return p, nil
	}
	width := vg.Points(min(24, 240/float64(len(names)*len(m.Variants))))
	var heights plotter.XYs
	longest := 0
	for i, v := range m.Variants {
		hits := hits(v.Name)
		vals := make(plotter.Values, len(names))
		for k, n := range names {
			h, ok := hits[n]
			if !ok || math.IsNaN(h) {
				h = 0 // drawn as no bar; the table says n/a
			}
			vals[k] = h
			heights = append(heights, plotter.XY{X: float64(k) - 0.3, Y: h}, plotter.XY{X: float64(k) + 0.3, Y: h})
		}
		longest = max(longest, len(variantLabel(v)))
		b, err := plotter.NewBarChart(vals, width)
		if err != nil {
			return nil, err
		}
		b.Color = colours[v.Name]
		b.LineStyle.Width = 0
		b.Offset = width * vg.Length(float64(i)-float64(len(m.Variants)-1)/2)
		p.Add(b)
		p.Legend.Add(variantLabel(v), b)
	}
	p.NominalX(names...)
	p.X.Min, p.X.Max = -0.6, float64(len(names))-0.4
	p.Y.Min, p.Y.Max = 0, 100
	p.Y.Tick.Marker = PlainTicks{Cap: 100}
	slices.SortFunc(heights, func(a, b plotter.XY) int { return cmp.Compare(a.X, b.X) })
	placeLegend(p, []curve{{pts: heights, filled: true}}, len(m.Variants), longest, figWidth, figHeight)
	return p, nil
}
