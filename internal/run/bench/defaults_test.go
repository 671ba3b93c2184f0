package bench

import (
	"testing"
)

// max_num_seqs defaults by what serves the run: the simulator's engines run the
// reference server's 32; real servers are assumed to run vLLM's 256, as `warden
// route` assumes (it was 32 for real servers too before).
func TestMaxNumSeqsFor(t *testing.T) {
	t.Parallel()
	if got := MaxNumSeqsFor(false); got != 32 {
		t.Errorf("simulator: %d, want sim.ReferenceMaxNumSeqs (32)", got)
	}
	if got := MaxNumSeqsFor(true); got != 256 {
		t.Errorf("real servers: %d, want router.VLLMDefaultMaxNumSeqs (256)", got)
	}
}
