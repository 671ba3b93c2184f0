package trace

import (
	"errors"
	"fmt"
	"time"
)

// SliceOptions select part of a trace.
type SliceOptions struct {
	// From and To bound the window [From, To) of recorded timestamps; To 0 means
	// the end of the trace.
	From, To time.Duration
	// Speedup divides the timestamps (after shifting the window's start to 0):
	// 2 replays the window in half the time. 0 means 1.
	Speedup float64
	// Sample keeps this fraction of conversations (all their turns or none),
	// chosen by a hash of (Seed, conversation's first request index); 0 means 1.
	Sample float64
	Seed   uint64
}

// Validate reports every bad option.
func (o SliceOptions) Validate() error {
	var errs []error
	if o.From < 0 {
		errs = append(errs, fmt.Errorf("from %v is negative", o.From))
	}
	if o.To != 0 && o.To <= o.From {
		errs = append(errs, fmt.Errorf("to %v is not after from %v", o.To, o.From))
	}
	if o.Speedup < 0 {
		errs = append(errs, fmt.Errorf("speedup %g is negative", o.Speedup))
	}
	if o.Sample < 0 || o.Sample > 1 {
		errs = append(errs, fmt.Errorf("sample %g is not a fraction in (0, 1]", o.Sample))
	}
	return errors.Join(errs...)
}

// Slicer applies SliceOptions request by request, in trace order. Conversations
// are reconstructed over the whole trace (Chainer), so a window's later turns are
// kept or dropped with their conversation's first turn even when it fell before
// the window.
type Slicer struct {
	o     SliceOptions
	chain *Chainer
}

// NewSlicer returns a Slicer (options validated).
func NewSlicer(o SliceOptions, blockSize int) (*Slicer, error) {
	if err := o.Validate(); err != nil {
		return nil, err
	}
	if o.Speedup == 0 {
		o.Speedup = 1
	}
	if o.Sample == 0 {
		o.Sample = 1
	}
	return &Slicer{o: o, chain: NewChainer(blockSize)}, nil
}

// Keep places r (every request of the trace must pass through Keep, in order) and
// reports whether it is in the slice; if so it rewrites r.Timestamp to the
// slice's time.
func (s *Slicer) Keep(r *Request) (Turn, bool) {
	t := s.chain.Add(r)
	if r.Timestamp < s.o.From || (s.o.To != 0 && r.Timestamp >= s.o.To) {
		return t, false
	}
	if s.o.Sample < 1 && !Sampled(s.o.Seed, t.Conversation, s.o.Sample) {
		return t, false
	}
	r.Timestamp = time.Duration(float64(r.Timestamp-s.o.From) / s.o.Speedup)
	return t, true
}

// Sampled reports whether conversation conv (its first request's index) is in a
// sample of fraction f under seed: a SplitMix64 hash of (seed, conv) mapped to
// [0, 1) is below f.
func Sampled(seed uint64, conv int, f float64) bool {
	u := chainHash(seed, int64(conv)) >> 11
	return float64(u)/(1<<53) < f
}

// Slice copies the requests of r that the options keep to w and returns how many
// it read and wrote.
func Slice(r *Reader, w *Writer, o SliceOptions) (read, written int, err error) {
	s, err := NewSlicer(o, r.BlockSize())
	if err != nil {
		return 0, 0, err
	}
	err = Each(r, func(req Request) error {
		read++
		if _, ok := s.Keep(&req); !ok {
			return nil
		}
		written++
		return w.Write(req)
	})
	return read, written, err
}
