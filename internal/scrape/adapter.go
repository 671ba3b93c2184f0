package scrape

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"

	dto "github.com/prometheus/client_model/go"

	"github.com/lmwarden/warden/internal/engines"
	"github.com/lmwarden/warden/internal/vllmmetrics"
)

// Adapter reads one engine kind's /metrics families into engines.Stats. Each
// figure's Source names the series it came from; a figure the engine did not
// report stays absent (empty Source), never zero.
type Adapter interface {
	Kind() engines.Kind
	// Capability is the engine's static description (engines.CapabilityOf).
	Capability() engines.Capability
	// Stats returns one Stats per engine (vLLM: per DP rank, in label order; the
	// others: exactly one), or none when the families hold none of its series.
	Stats(fams map[string]*dto.MetricFamily) []*engines.Stats
}

var (
	_ Adapter = VLLM{}
	_ Adapter = SGLang{}
	_ Adapter = LlamaCpp{}
)

// AdapterFor returns the adapter of k; KindUnknown (or any other value) is an
// error.
func AdapterFor(k engines.Kind) (Adapter, error) {
	switch k {
	case engines.KindVLLM:
		return VLLM{}, nil
	case engines.KindSGLang:
		return SGLang{}, nil
	case engines.KindLlamaCpp:
		return LlamaCpp{}, nil
	}
	return nil, fmt.Errorf("choosing a /metrics adapter: no adapter for engine kind %q", k)
}

// DetectKind names the engine of a /metrics body from its family names (vllm:,
// sglang:, llamacpp: prefixes; expfmt drops a family declared by HELP/TYPE lines
// without a sample, so such a family is no evidence). It returns KindUnknown when no family has a known prefix or two engines
// tie; counts gives the number of families per kind for a diagnostic.
func DetectKind(fams map[string]*dto.MetricFamily) (kind engines.Kind, counts map[engines.Kind]int) {
	counts = map[engines.Kind]int{}
	for name := range fams {
		if k := engines.KindOfSeries(name); k != engines.KindUnknown {
			counts[k]++
		}
	}
	kind, best, tie := engines.KindUnknown, 0, false
	for _, k := range engines.Kinds {
		switch n := counts[k]; {
		case n > best:
			kind, best, tie = k, n, false
		case n == best && n > 0:
			tie = true
		}
	}
	if tie {
		return engines.KindUnknown, counts
	}
	return kind, counts
}

// ParseEngine reads a Prometheus text exposition as engine kind (KindUnknown:
// detected with DetectKind). It fails only when the text cannot be parsed; a body
// of an unidentifiable engine gives a Snapshot of KindUnknown with no Ranks, and
// a body with none of the chosen kind's series a Snapshot with no Ranks.
func ParseEngine(r io.Reader, kind engines.Kind) (*engines.Snapshot, error) {
	fams, err := decode(r)
	if err != nil {
		return nil, err
	}
	return fromFamilies(fams, kind), nil
}

func fromFamilies(fams map[string]*dto.MetricFamily, kind engines.Kind) *engines.Snapshot {
	if kind == engines.KindUnknown {
		kind, _ = DetectKind(fams)
	}
	snap := &engines.Snapshot{Kind: kind}
	if a, err := AdapterFor(kind); err == nil {
		snap.Ranks = a.Stats(fams)
	}
	return snap
}

// FetchEngine GETs url (an engine's /metrics) and parses it with ParseEngine.
// Errors name the URL: the request, a non-200 status (a *StatusError: llama-server
// without --metrics answers 501, SGLang without --enable-metrics 404), or the
// parse.
func FetchEngine(ctx context.Context, client *http.Client, url, userAgent string, kind engines.Kind) (*engines.Snapshot, error) {
	return fetch(ctx, client, url, userAgent, func(r io.Reader) (*engines.Snapshot, error) { return ParseEngine(r, kind) })
}

// Families is one /metrics body parsed into its metric families by name
// (FetchFamilies), to be read as vLLM series (VLLM), named by its engine
// (Kind) or read by an engine's adapter (Engine) without fetching it again: a
// router that must tell "a vLLM server" from "a server of another engine"
// reads the body once.
type Families map[string]*dto.MetricFamily

// FetchFamilies GETs url (an engine's /metrics) and parses the body into its
// families. Errors as Fetch's: the request, a non-200 status (*StatusError),
// the body's transfer, or the parse (*ParseError).
func FetchFamilies(ctx context.Context, client *http.Client, url, userAgent string) (Families, error) {
	return fetch(ctx, client, url, userAgent, func(r io.Reader) (Families, error) { return decode(r) })
}

// VLLM is the body's vLLM series per engine (Parse's Snapshot; no Engines
// when it has none).
func (f Families) VLLM() *vllmmetrics.Snapshot { return parseVLLM(f) }

// Kind is the engine the body names (DetectKind), KindUnknown for none or a tie.
func (f Families) Kind() engines.Kind {
	k, _ := DetectKind(f)
	return k
}

// Engine is the body read as engine kind (KindUnknown: detected), as
// ParseEngine reads it.
func (f Families) Engine(kind engines.Kind) *engines.Snapshot { return fromFamilies(f, kind) }

// labelsOf returns a metric's labels as a map.
func labelsOf(m *dto.Metric) map[string]string {
	out := make(map[string]string, len(m.GetLabel()))
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}

// sortedKeys returns the keys of m in order.
func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
