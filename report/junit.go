package report

import (
	"encoding/xml"
	"fmt"
	"math"
	"slices"
	"strings"
)

// JUnit XML (the schema CI systems read: testsuites > testsuite > testcase,
// with failure and error children), written by `warden compare --junit FILE`.
// encoding/xml is enough for the few elements used.

// JUnitSuites is the document's root.
type JUnitSuites struct {
	XMLName  xml.Name     `xml:"testsuites"`
	Name     string       `xml:"name,attr"`
	Tests    int          `xml:"tests,attr"`
	Failures int          `xml:"failures,attr"`
	Errors   int          `xml:"errors,attr"`
	Suites   []JUnitSuite `xml:"testsuite"`
}

// JUnitSuite is one variant's checks (or the one refused comparison).
type JUnitSuite struct {
	Name       string          `xml:"name,attr"`
	Tests      int             `xml:"tests,attr"`
	Failures   int             `xml:"failures,attr"`
	Errors     int             `xml:"errors,attr"`
	Properties []JUnitProperty `xml:"properties>property,omitempty"`
	Cases      []JUnitCase     `xml:"testcase"`
	SystemOut  string          `xml:"system-out,omitempty"`
}

// JUnitProperty is a name and value of a suite (the runs compared).
type JUnitProperty struct {
	Name  string `xml:"name,attr"`
	Value string `xml:"value,attr"`
}

// JUnitCase is one gate on one stage (or a stage no gate applied to).
type JUnitCase struct {
	ClassName string        `xml:"classname,attr"`
	Name      string        `xml:"name,attr"`
	Failure   *JUnitProblem `xml:"failure,omitempty"`
	Error     *JUnitProblem `xml:"error,omitempty"`
	SystemOut string        `xml:"system-out,omitempty"`
}

// JUnitProblem is a failure (a gate crossed) or an error (the runs could not
// be compared).
type JUnitProblem struct {
	Message string `xml:"message,attr"`
	Type    string `xml:"type,attr"`
	Text    string `xml:",chardata"`
}

// JUnitClass is the classname prefix of every case: JUnitClass + "." +
// variant.
const JUnitClass = "warden.compare"

// JUnit returns c's verdicts as JUnit XML: a testsuite per variant compared,
// a testcase per stage and gate (Checks) named "stage N (S sessions): gate",
// failing when the gate failed, with the numbers (A, B, change, 95 % interval)
// in its message; a stage no gate applied to is one passing case "stage N (S
// sessions): compared". A gate that could not be checked is a failing case of
// its variant. Notes go to the suites' system-out.
func (c *Comparison) JUnit() ([]byte, error) {
	doc := JUnitSuites{Name: "warden compare " + c.A + " -> " + c.B}
	var variants []string
	for _, s := range c.Stages {
		if !slices.Contains(variants, s.Variant) {
			variants = append(variants, s.Variant)
		}
	}
	for _, gc := range c.Checks {
		if !slices.Contains(variants, gc.Variant) {
			variants = append(variants, gc.Variant)
		}
	}
	for _, v := range variants {
		suite := JUnitSuite{
			Name:       "variant " + v,
			Properties: []JUnitProperty{{"run_a", c.A}, {"run_b", c.B}},
			SystemOut:  strings.Join(c.Notes, "\n"),
		}
		for _, s := range c.Stages {
			if s.Variant == v {
				suite.Cases = append(suite.Cases, c.stageCases(s)...)
			}
		}
		for _, gc := range c.Checks {
			if gc.Variant == v && gc.Stage < 0 {
				suite.Cases = append(suite.Cases, gateCase(gc))
			}
		}
		doc.add(suite)
	}
	return marshalJUnit(doc)
}

// stageCases are the cases of one stage: one per check of it, or one passing
// "compared" case when no gate applied.
func (c *Comparison) stageCases(s StageComparison) []JUnitCase {
	var out []JUnitCase
	for _, gc := range c.Checks {
		if gc.Variant == s.Variant && gc.Stage == s.Stage && gc.Stage >= 0 {
			out = append(out, gateCase(gc))
		}
	}
	if len(out) == 0 {
		var lines []string
		for _, d := range s.Deltas {
			lines = append(lines, deltaText(d))
		}
		out = append(out, JUnitCase{
			ClassName: JUnitClass + "." + s.Variant,
			Name:      fmt.Sprintf("%s: compared", stageLabel(s.Stage, s.Sessions)),
			SystemOut: strings.Join(lines, "\n"),
		})
	}
	return out
}

// gateCase is the case of one check.
func gateCase(gc GateCheck) JUnitCase {
	jc := JUnitCase{ClassName: JUnitClass + "." + gc.Variant}
	if gc.Stage < 0 {
		jc.Name = gc.Gate.String()
		jc.Failure = &JUnitProblem{Type: "gate", Message: gc.Reason, Text: gc.Reason}
		return jc
	}
	jc.Name = stageLabel(gc.Stage, gc.Sessions) + ": " + gc.Gate.String()
	nums := deltaText(gc.Delta)
	switch {
	case gc.Failed:
		msg := fmt.Sprintf("%s: %s", nums, gc.Reason)
		jc.Failure = &JUnitProblem{Type: "gate", Message: msg, Text: msg}
	case gc.WithinNoise:
		jc.SystemOut = nums + ": past the limit but within the stage's noise (--strict-gates fails it)"
	default:
		jc.SystemOut = nums + ": within the limit"
	}
	return jc
}

// stageLabel names a stage as the compare table does: its 1-based number and
// its sessions.
func stageLabel(stage, sessions int) string {
	return fmt.Sprintf("stage %d (%d sessions)", stage+1, sessions)
}

// deltaText is one metric's numbers: "ttfb_p95_s A 5.97 -> B 5.32 (-0.647, -10.8%,
// 95% CI +-1.613, within noise)"; "no noise estimate" for a stage under two
// sub-windows.
func deltaText(d Delta) string {
	f, df := formatFor(d.Metric), diffFormatFor(d.Metric)
	rel := "n/a"
	if !math.IsNaN(d.RelPct) {
		rel = fmt.Sprintf("%+.1f%%", d.RelPct)
	}
	ci := "no noise estimate"
	if !math.IsNaN(d.CIHalf) {
		ci = "95% CI +-" + df(d.CIHalf)
	}
	return fmt.Sprintf("%s A %s -> B %s (%s, %s, %s, %s)", d.Metric, f(d.Base), f(d.Value), df(d.Diff), rel, ci, verdict(d))
}

// JUnitRefused is the JUnit XML of a comparison that did not run (the runs
// could not be read or were refused, err): one suite with one case in error.
func JUnitRefused(a, b string, err error) ([]byte, error) {
	doc := JUnitSuites{Name: "warden compare " + a + " -> " + b}
	doc.add(JUnitSuite{
		Name:       "compare",
		Properties: []JUnitProperty{{"run_a", a}, {"run_b", b}},
		Cases: []JUnitCase{{
			ClassName: JUnitClass,
			Name:      "compare runs",
			Error:     &JUnitProblem{Type: "compare", Message: err.Error(), Text: err.Error()},
		}},
	})
	return marshalJUnit(doc)
}

// add appends suite with its counts, and adds them to the document's.
func (doc *JUnitSuites) add(suite JUnitSuite) {
	for _, jc := range suite.Cases {
		suite.Tests++
		if jc.Failure != nil {
			suite.Failures++
		}
		if jc.Error != nil {
			suite.Errors++
		}
	}
	doc.Tests += suite.Tests
	doc.Failures += suite.Failures
	doc.Errors += suite.Errors
	doc.Suites = append(doc.Suites, suite)
}

func marshalJUnit(doc JUnitSuites) ([]byte, error) {
	b, err := xml.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("writing JUnit XML: %w", err)
	}
	return append([]byte(xml.Header), append(b, '\n')...), nil
}
