package routerhttp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/simclock"
	"github.com/lmwarden/warden/internal/wire"
)

// dpServer is a stand-in for a vLLM server with DP ranks: it counts each chat
// completion on an engine (the pinned rank, or round robin when it ignores the
// header), adds extra finished requests per probe on engine 0 (other traffic), and
// exports the counts as vllm:request_success_total per engine; or it serves a fixed
// /metrics body, or refuses the probes with a status.
type dpServer struct {
	mu       sync.Mutex
	ranks    int
	ignore   bool
	extra    int
	status   int    // probe status; 0 = 200
	metrics  string // fixed /metrics body; "" = the counts
	finished []int
	next     int
	// lag > 0: a probe shows in /metrics only after lag further scrapes, while
	// the extra requests show at once (a busy server whose counters trail).
	lag     int
	pending []struct{ k, scrapes int }
	ranked  []string // the X-Data-Parallel-Rank of each chat completion ("" without)
}

func (d *dpServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	d.mu.Lock()
	defer d.mu.Unlock()
	switch r.URL.Path {
	case "/v1/models":
		fmt.Fprint(w, `{"object":"list","data":[{"id":"served-model"}]}`)
	case "/health":
	case "/v1/chat/completions":
		d.ranked = append(d.ranked, r.Header.Get(wire.HeaderDPRank))
		if d.status != 0 {
			http.Error(w, `{"error":"unauthorized"}`, d.status)
			return
		}
		k := d.next % d.ranks
		d.next++
		if h := r.Header.Get(wire.HeaderDPRank); h != "" && !d.ignore {
			k, _ = strconv.Atoi(h)
		}
		if d.lag > 0 {
			d.pending = append(d.pending, struct{ k, scrapes int }{k, d.lag})
		} else {
			d.finished[k]++
		}
		d.finished[0] += d.extra
		fmt.Fprint(w, `{"choices":[{"message":{"content":"ok"}}]}`)
	case "/metrics":
		kept := d.pending[:0]
		for _, p := range d.pending {
			if p.scrapes--; p.scrapes <= 0 {
				d.finished[p.k]++
			} else {
				kept = append(kept, p)
			}
		}
		d.pending = kept
		if d.metrics != "" {
			fmt.Fprint(w, d.metrics)
			return
		}
		fmt.Fprintln(w, "# TYPE vllm:request_success_total counter")
		for k, n := range d.finished {
			// Two finished_reason series per engine: the parser sums them.
			fmt.Fprintf(w, "vllm:request_success_total{engine=\"%d\",finished_reason=\"length\",model_name=\"served-model\"} %d\n", k, n)
			fmt.Fprintf(w, "vllm:request_success_total{engine=\"%d\",finished_reason=\"stop\",model_name=\"served-model\"} 7\n", k)
		}
	default:
		http.NotFound(w, r)
	}
}

func TestCheckDPPinning(t *testing.T) {
	excerpt, err := os.ReadFile("testdata/vllm-metrics-v1-0.10.0-engine0-excerpt.txt")
	if err != nil {
		t.Fatal(err)
	}
	// The recorded excerpt holds engine 0's series; a 4-rank server exports the
	// same for engines 1-3.
	var fixture strings.Builder
	for _, line := range strings.SplitAfter(string(excerpt), "\n") {
		if strings.HasPrefix(line, "#") || !strings.Contains(line, `engine="0"`) {
			fixture.WriteString(line)
			continue
		}
		for k := range 4 {
			fixture.WriteString(strings.ReplaceAll(line, `engine="0"`, fmt.Sprintf(`engine="%d"`, k)))
		}
	}
	tests := []struct {
		name    string
		srv     *dpServer
		ranks   int
		want    PinVerdict
		explain string // a part of the detail
	}{
		{"pinned", &dpServer{}, 4, PinHonored, "each of 4 ranks"},
		{"header ignored", &dpServer{ignore: true}, 4, PinIgnored, "pinned to rank 3"},
		{"two ranks, header ignored", &dpServer{ignore: true}, 2, PinIgnored, "engine 1 counted 1 within 2s (requests finished per engine meanwhile, other traffic included: engine 0: 1, engine 1: 1)"},
		{"other traffic on every attempt", &dpServer{extra: 1}, 4, PinUnverified, "other requests finished"},
		{"other traffic, header ignored", &dpServer{ignore: true, extra: 1}, 4, PinIgnored, "pinned to rank 3"},
		// Other requests finish before the probes show: not taken for "ignored".
		{"counters trail other traffic", &dpServer{extra: 1, lag: 3}, 4, PinUnverified, "other requests finished"},
		{"counters trail, idle server", &dpServer{lag: 3}, 4, PinHonored, "each of 4 ranks"},
		{"probes refused", &dpServer{status: http.StatusUnauthorized}, 4, PinUnverified, "status 401"},
		{"recorded vLLM 0.10 /metrics excerpt: no finished counts", &dpServer{metrics: fixture.String()}, 4, PinUnverified, `no vllm:request_success_total{engine="0"}`},
		{"one rank", &dpServer{}, 1, PinUnverified, "nothing to pin"},
		{"more ranks configured than the server has", &dpServer{}, 8, PinRankMismatch, "dp_ranks is 8 but the server's /metrics lists 4 engines (0, 1, 2, 3)"},
		{"fewer ranks configured than the server has", &dpServer{}, 2, PinHonored, "the router sends nothing to engines 2-3"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.srv.ranks = 4
			tc.srv.finished = make([]int, 4)
			srv := httptest.NewServer(tc.srv)
			defer srv.Close()
			got := CheckDPPinning(context.Background(), srv.Client(), srv.URL+"/", "*", tc.ranks)
			if got.Verdict != tc.want || !strings.Contains(got.Detail, tc.explain) {
				t.Errorf("got %q: %s; want %q with %q", got.Verdict, got.Detail, tc.want, tc.explain)
			}
		})
	}
}

// Regression: a DP server whose pinning check said "ignored" still got
// conversations pinned to its ranks. Now it is served as one replica: rank 0,
// no rank header, the other ranks out of placement.
func TestIgnoredPinningServesTheServerAsOneReplica(t *testing.T) {
	d := &dpServer{ignore: true, ranks: 2, finished: make([]int, 2)}
	srv := httptest.NewServer(d)
	defer srv.Close()
	cfg := Config{HealthInterval: time.Hour, ScrapeInterval: -1, Clock: &simclock.Manual{},
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
		Models: []ModelConfig{{Name: "*", Replicas: []ReplicaConfig{{Name: "dp", URL: srv.URL, DPRanks: 2}}}}}
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(guard)
	for {
		st := rt.Status().Models[0].Replicas[0]
		if p := st.DPPinning; p != nil && p.Verdict == PinIgnored {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ignored verdict: %+v", st.DPPinning)
		}
		time.Sleep(10 * time.Millisecond)
	}
	d.mu.Lock()
	probes := len(d.ranked)
	d.mu.Unlock()
	front := httptest.NewServer(rt.Handler())
	defer front.Close()
	for i := range 6 {
		req, _ := http.NewRequest(http.MethodPost, front.URL+wire.PathChatCompletions, strings.NewReader(`{"model":"served-model","messages":[{"role":"user","content":"hi"}]}`))
		req.Header.Set(wire.HeaderSessionID, fmt.Sprint("conv-", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if got := resp.Header.Get(wire.HeaderReplica); resp.StatusCode != 200 || got != "dp/rank0" {
			t.Errorf("conv-%d: %d on %q, want 200 on dp/rank0 (the server as one replica)", i, resp.StatusCode, got)
		}
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	for i, h := range d.ranked[probes:] {
		if h != "" {
			t.Errorf("request %d after the check was pinned to rank %s", i, h)
		}
	}
}
