package routerhttp

import (
	"net/url"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/lmwarden/warden/router"
)

// Upstream is where a replica is reached: a base URL and, for a DP rank behind a
// shared endpoint, the rank pinned with X-Data-Parallel-Rank (-1: not pinned).
type Upstream struct {
	Name string
	URL  *url.URL
	Rank int
}

// Pool is one model's replicas: Upstreams[i] is the Balancer's replica i.
// Upstreams is set before the pool serves; afterwards replicas are added only
// with AddUpstream and read with Upstream / UpstreamList (Router.AddReplica).
type Pool struct {
	Model     string // model name, or WildcardModel
	Balancer  *router.Balancer
	Upstreams []Upstream

	mu sync.RWMutex // guards Upstreams once the pool serves

	// learnSlots: the model's max_num_seqs is not configured, so once it is
	// slot-based (every replica llama.cpp) it is learned from /props slots
	// (Router.applySlotRule, router.Balancer.SetSlotBased).
	learnSlots bool

	// lastModel is the latest "model" a client asked this pool for: the model
	// an ejected replica's probe asks for when the pool serves any model.
	lastModel atomic.Pointer[string]

	askedMu sync.Mutex
	asked   map[string]struct{} // models clients asked a "*" pool for or its replicas list (at most maxAskedModels)
}

// maxAskedModels bounds the names a "*" pool remembers, so clients sending
// arbitrary model names cannot grow it.
const maxAskedModels = 64

// noteModel records model as asked for this pool (called when lastModel changes).
func (p *Pool) noteModel(model string) {
	p.lastModel.Store(&model)
	p.addKnown(model)
}

// addKnown records model as one the admin API may name for this pool.
func (p *Pool) addKnown(model string) {
	p.askedMu.Lock()
	defer p.askedMu.Unlock()
	if p.asked == nil {
		p.asked = map[string]struct{}{}
	}
	if len(p.asked) < maxAskedModels {
		p.asked[model] = struct{}{}
	}
}

// askedModels returns the models clients asked this pool for, sorted.
func (p *Pool) askedModels() []string {
	p.askedMu.Lock()
	defer p.askedMu.Unlock()
	out := make([]string, 0, len(p.asked))
	for m := range p.asked {
		out = append(out, m)
	}
	slices.Sort(out)
	return out
}

// probeModel is the model a probe of the pool's replicas asks for.
func (p *Pool) probeModel() string {
	if p.Model != WildcardModel {
		return p.Model
	}
	if m := p.lastModel.Load(); m != nil {
		return *m
	}
	return ""
}

// Upstream returns replica i's upstream.
func (p *Pool) Upstream(i int) Upstream {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return p.Upstreams[i]
}

// UpstreamList returns a copy of the upstreams (index = Balancer replica).
func (p *Pool) UpstreamList() []Upstream {
	p.mu.RLock()
	defer p.mu.RUnlock()
	return append([]Upstream(nil), p.Upstreams...)
}

// unpin stops pinning replica i's requests to a DP rank (Rank -1).
func (p *Pool) unpin(i int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.Upstreams[i].Rank = -1
}

// AddUpstream appends u and then the matching Balancer replica (healthy, no
// session moves; Balancer.AddReplica), in that order, so a request routed to the
// new index always finds its upstream. It returns the replica's index.
func (p *Pool) AddUpstream(u Upstream) int {
	p.mu.Lock()
	p.Upstreams = append(p.Upstreams, u)
	p.mu.Unlock()
	return p.Balancer.AddReplica(u.Name)
}
