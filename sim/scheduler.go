package sim

// The scheduler mirrors vLLM V1's Scheduler.schedule() (vllm/v1/core/sched/scheduler.py)
// for the FCFS policy with chunked prefill and prefix caching on, no speculative
// decoding, no LoRA, no multimodal inputs, and KVCacheManager.allocate_slots /
// get_computed_blocks (vllm/v1/core/kv_cache_manager.py).

// schedule builds the next batch in e.batch and returns its cost. One token budget
// (max_num_batched_tokens) is shared by running requests first (decodes and
// unfinished prefill chunks, in order), then by waiting requests admitted FCFS while
// fewer than max_num_seqs run. A running request that cannot get blocks preempts the
// newest running request (possibly itself); after any preemption nothing is admitted
// this step. A waiting request that cannot get blocks stops admission for this step.
func (e *Engine) schedule() stepCost {
	cost := e.cfg.Profile.newCost()
	budget := e.cfg.MaxNumBatchedTokens
	preempted := false

	for i := 0; i < len(e.running) && budget > 0; {
		q := e.running[i]
		n := min(len(q.tokens)-q.computed, budget)
		if n <= 0 {
			i++
			continue
		}
		scheduled := true
		for !e.allocateSlots(q, n, nil) {
			victim := e.running[len(e.running)-1]
			e.running[len(e.running)-1] = nil
			e.running = e.running[:len(e.running)-1]
			e.preempt(victim)
			preempted = true
			if victim == q {
				scheduled = false
				break
			}
		}
		if !scheduled {
			break
		}
		cost.add(SeqWork{Start: q.computed, New: n})
		e.addToBatch(q, n)
		budget -= n
		i++
	}

	if preempted {
		return cost
	}
	for e.waiting.len() > 0 && budget > 0 && len(e.running) < e.cfg.MaxNumSeqs {
		q := e.waiting.front()
		// get_computed_blocks: longest cached run, capped at num_tokens-1 so that at
		// least one token is computed (to produce logits).
		bs := e.cfg.BlockSize
		// A request that failed to get blocks with the pool as it is now gets the
		// same lookup and fails again for as many tokens: skip both. (Not with
		// sliding-window groups, whose allocateSlots frees blocks even when it fails.)
		unchanged := q.failVer == e.pool.version+1 && e.slideGroups == 0 && !e.noFailMemo
		if !unchanged {
			q.hitIDs = e.pool.lookupAgain(q.hitIDs, q.hitSeen, q.hashes, (len(q.tokens)-1)/bs)
			q.hitSeen = e.pool.evictions
		}
		hit := len(q.hitIDs) * bs
		if e.cfg.CountPrefixStatsPerAttempt {
			e.stats.PrefixQueries += int64(len(q.tokens))
			e.stats.PrefixHits += int64(hit)
		}
		n := min(len(q.tokens)-hit, budget)
		if unchanged && n >= q.failN {
			break
		}
		if !e.allocateSlots(q, n, q.hitIDs) {
			q.failVer, q.failN = e.pool.version+1, n
			break
		}
		e.waiting.popFront()
		q.state = stateRunning
		e.running = append(e.running, q)
		q.computed = hit
		if !q.admitted {
			// Recorded at admission, once; preempted re-admissions are kept out
			// of the exported counters (PrefixCacheStats.record(preempted=...)).
			q.admitted = true
			q.cachedTokens = hit
			if !e.cfg.CountPrefixStatsPerAttempt {
				e.stats.PrefixQueries += int64(len(q.tokens))
				e.stats.PrefixHits += int64(hit)
			}
		}
		cost.add(SeqWork{Start: q.computed, New: n})
		e.addToBatch(q, n)
		budget -= n
	}
	return cost
}

// addToBatch records n scheduled tokens and advances num_computed_tokens at schedule
// time, as vLLM's _update_after_schedule does.
func (e *Engine) addToBatch(q *request, n int) {
	q.scheduled = n
	q.computed += n
	if !q.inBatch {
		q.inBatch = true
		e.batch = append(e.batch, q)
	}
}

// allocateSlots gives q the blocks it needs for computed+len(hits)*bs+n tokens, taking
// the cache-hit blocks hits first (KVCacheManager.allocate_slots). It fails, changing
// nothing, when the free queue is too short; hit blocks that sit in the free queue
// count against it because touching them removes them from the queue
// (get_num_blocks_to_allocate). On success it offers every newly full block, up to
// the scheduled tokens, to the prefix cache (cache_blocks at schedule time).
//
// With sliding-window layers (Engine.slideGroups > 0) the request also holds, in
// every sliding-window group, the blocks covering its window (Profile.SlidingBlocks):
// blocks that fell out of the window are freed first, even if the allocation then
// fails (SlidingWindowManager.remove_skipped_blocks runs at the top of
// allocate_slots), and the blocks for the new tokens count against the free queue
// with the rest. Those blocks carry no prefix-cache hash (see the package doc).
func (e *Engine) allocateSlots(q *request, n int, hits []int32) bool {
	bs := e.cfg.BlockSize
	computed := q.computed + len(hits)*bs
	need := (computed + n + bs - 1) / bs
	newBlocks := need - len(q.blocks) - len(hits)
	slideNew, slideHi := 0, 0
	if g := e.slideGroups; g > 0 {
		lo := max(0, computed-e.window+1) / bs
		slideHi = (computed + n + bs - 1) / bs
		if drop := min(lo, q.slideHi) - q.slideLo; drop > 0 {
			e.pool.freeReversed(q.slide[:drop*g])
			q.slide = q.slide[:copy(q.slide, q.slide[drop*g:])]
			q.slideLo += drop
		}
		if q.slideHi <= lo { // nothing held in the window (new or preempted request)
			q.slideLo, q.slideHi = lo, lo
		}
		slideNew = g * max(0, slideHi-q.slideHi)
	}
	// Blocks taken off the free queue: the new ones plus the hits nobody else holds.
	// Count the latter only when the bounds 0..len(hits) do not decide, and stop as
	// soon as they exceed the free queue (a request that waits for blocks is tried
	// at every step). The scan runs from the deepest hit, which is the likeliest to
	// be idle: shallow blocks (the shared system prompt) are held by other requests.
	take := max(newBlocks, 0) + slideNew
	if take > e.pool.numFree {
		return false
	}
	if take+len(hits) > e.pool.numFree {
		for k := len(hits) - 1; k >= 0; k-- {
			if e.pool.blocks[hits[k]].refCnt == 0 {
				if take++; take > e.pool.numFree {
					return false
				}
			}
		}
	}
	if len(hits) > 0 {
		e.pool.touch(hits)
		q.blocks = append(q.blocks, hits...)
		q.numCachedBlocks = len(q.blocks) // hit blocks are cached already
	}
	if newBlocks > 0 {
		q.blocks = e.pool.allocate(q.blocks, newBlocks)
	}
	if slideNew > 0 {
		q.slide = e.pool.allocate(q.slide, slideNew)
		q.slideHi = slideHi
	}
	full := min(computed+n, len(q.tokens)) / bs
	for k := q.numCachedBlocks; k < full; k++ {
		e.pool.cacheBlock(q.blocks[k], q.hashes[k])
	}
	if full > q.numCachedBlocks {
		q.numCachedBlocks = full
	}
	return true
}

// preempt frees a running request's blocks (hashes stay in the cache), resets its
// progress to zero while keeping the tokens it has emitted, and puts it at the front
// of the waiting queue (Scheduler._preempt_request).
func (e *Engine) preempt(q *request) {
	e.freeBlocks(q)
	q.numCachedBlocks = 0
	q.computed = 0
	q.numPreemptions++
	q.state = stateWaiting
	e.waiting.pushFront(q)
	e.stats.Preemptions++
	e.events = append(e.events, Event{ReqID: q.id, Kind: EventPreempted, PromptTokens: q.promptLen,
		CachedTokens: q.cachedTokens, OutputTokens: q.numOutput})
}

// deque is the waiting queue: a ring buffer with push at both ends (vLLM's
// FCFSRequestQueue with prepend_request for preempted requests).
type deque struct {
	buf        []*request
	head, size int
}

func (d *deque) len() int { return d.size }

func (d *deque) grow() {
	n := max(16, 2*len(d.buf))
	nb := make([]*request, n)
	for i := range d.size {
		nb[i] = d.buf[(d.head+i)%len(d.buf)]
	}
	d.buf, d.head = nb, 0
}

func (d *deque) pushBack(q *request) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.buf[(d.head+d.size)%len(d.buf)] = q
	d.size++
}

func (d *deque) pushFront(q *request) {
	if d.size == len(d.buf) {
		d.grow()
	}
	d.head = (d.head - 1 + len(d.buf)) % len(d.buf)
	d.buf[d.head] = q
	d.size++
}

func (d *deque) front() *request { return d.buf[d.head] }

func (d *deque) popFront() *request {
	q := d.buf[d.head]
	d.buf[d.head] = nil
	d.head = (d.head + 1) % len(d.buf)
	d.size--
	return q
}

// at returns the i-th request from the front.
func (d *deque) at(i int) *request { return d.buf[(d.head+i)%len(d.buf)] }

// remove deletes q, keeping the order of the others (O(n), for Abort).
func (d *deque) remove(q *request) {
	for i := range d.size {
		if d.at(i) != q {
			continue
		}
		for j := i; j < d.size-1; j++ {
			d.buf[(d.head+j)%len(d.buf)] = d.buf[(d.head+j+1)%len(d.buf)]
		}
		d.buf[(d.head+d.size-1)%len(d.buf)] = nil
		d.size--
		return
	}
}
