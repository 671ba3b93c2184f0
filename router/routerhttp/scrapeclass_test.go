package routerhttp

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/lmwarden/warden/internal/scrape"
)

// Every way a /metrics can fail, from real transport errors, sorts into its
// class; the two texts of a hanging /metrics (which timer fires first) are one
// class.
func TestScrapeErrorClass(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Query().Get("case") {
		case "status":
			http.Error(w, "boom", http.StatusInternalServerError)
		case "garbage":
			io.WriteString(w, "this is { not prometheus text\n")
		case "slowbody":
			// Headers and part of the body, then nothing.
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "# TYPE vllm:num_requests_running gauge\n")
			w.(http.Flusher).Flush()
			select {
			case <-release:
			case <-r.Context().Done():
			}
		case "cut":
			// Part of the body, then the connection closes.
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, "# TYPE vllm:num_requests_running gauge\n")
			w.(http.Flusher).Flush()
			c, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				c.Close()
			}
		default: // hang before the headers
			select {
			case <-release:
			case <-r.Context().Done():
			}
		}
	}))
	defer srv.Close()
	defer close(release) // before srv.Close: let the hanging handlers return

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	refused := "http://" + ln.Addr().String()
	ln.Close() // nothing listens there now

	headerTimeout := &http.Client{Transport: NewTransport(time.Second, 100*time.Millisecond)}
	for _, tc := range []struct {
		name   string
		ctx    time.Duration // > 0: the context's deadline from the start of the case
		client *http.Client  // nil: a 100 ms client timeout
		url    string
		want   string
	}{
		{"client timeout", 0, nil, srv.URL + "/metrics?case=hang", scrapeTimeout},
		// The router's client: the transport's header timeout fires first.
		{"header timeout", 0, headerTimeout, srv.URL + "/metrics?case=hang", scrapeTimeout},
		{"context deadline", 100 * time.Millisecond, &http.Client{}, srv.URL + "/metrics?case=hang", scrapeTimeout},
		{"timeout reading the body", 0, nil, srv.URL + "/metrics?case=slowbody", scrapeTimeout},
		{"refused", 0, nil, refused + "/metrics", scrapeRefused},
		{"body cut off", 0, nil, srv.URL + "/metrics?case=cut", scrapeConnection},
		{"status 500", 0, nil, srv.URL + "/metrics?case=status", scrapeBadStatus},
		{"not prometheus text", 0, nil, srv.URL + "/metrics?case=garbage", scrapeParse},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client := tc.client
			if client == nil {
				client = &http.Client{Timeout: 100 * time.Millisecond}
			}
			ctx := context.Background()
			if tc.ctx > 0 {
				var cancel context.CancelFunc
				ctx, cancel = context.WithTimeout(ctx, tc.ctx)
				defer cancel()
			}
			_, err := scrape.Fetch(ctx, client, tc.url, "")
			if err == nil {
				t.Fatal("the scrape succeeded")
			}
			if got := scrapeErrorClass(err); got != tc.want {
				t.Errorf("class %q, want %q (err: %v)", got, tc.want, err)
			}
		})
	}
}

// The fresh-user finding: against a /metrics that hangs the warning came 8
// times in 100 s, alternating between two timeout texts. It now comes once per
// kind of failure; /status keeps the latest text.
func TestScrapeWarningOncePerClass(t *testing.T) {
	var log bytes.Buffer
	cfg, err := ConfigForURLs([]string{"a=http://127.0.0.1:1"}, true)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = slog.New(slog.NewTextHandler(&log, nil))
	rt, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	tg := rt.targetList()[0]
	ctx := context.Background()
	const (
		deadline = `scraping http://a/metrics: Get "http://a/metrics": context deadline exceeded (Client.Timeout exceeded while awaiting headers)`
		headers  = `scraping http://a/metrics: Get "http://a/metrics": net/http: timeout awaiting response headers`
	)
	for range 4 {
		rt.scrapeFailed(ctx, tg, scrapeTimeout, deadline)
		rt.scrapeFailed(ctx, tg, scrapeTimeout, headers)
	}
	warn := "replica metrics cannot be read"
	if n := strings.Count(log.String(), warn); n != 1 {
		t.Errorf("%d warnings over 8 timeouts with two texts, want 1:\n%s", n, log.String())
	}
	if got := rt.Status().Models[0].Replicas[0].ScrapeError; got != headers {
		t.Errorf("/status scrape_error %q, want the latest text %q", got, headers)
	}
	rt.scrapeFailed(ctx, tg, scrapeRefused, "connection refused")
	if n := strings.Count(log.String(), warn); n != 2 {
		t.Errorf("%d warnings after the class changed to refused, want 2:\n%s", n, log.String())
	}
	if !strings.Contains(log.String(), "class=refused") {
		t.Errorf("the warning does not name the class:\n%s", log.String())
	}
	rt.scrapeFailed(ctx, tg, "", "")
	rt.scrapeFailed(ctx, tg, "", "")
	if n := strings.Count(log.String(), "replica metrics readable again"); n != 1 {
		t.Errorf("%d recovery lines, want 1:\n%s", n, log.String())
	}
}
