package sim

import (
	"testing"
	"time"
)

func TestFrontendSerializesOneProcess(t *testing.T) {
	c := FrontendCosts{ChatTemplate: time.Millisecond, TokenizePerToken: time.Microsecond, EngineCoreHop: 100 * time.Microsecond, DetokenizePerToken: 10 * time.Microsecond}
	f := NewFrontend(c, 1)
	// Two 10k-token prompts at the same instant: the second waits for the first.
	p0, r0 := f.Admit(0, 10_000)
	p1, r1 := f.Admit(0, 10_000)
	if p0 != 0 || p1 != 0 {
		t.Fatalf("processes %d, %d; want 0, 0", p0, p1)
	}
	if want := 11 * time.Millisecond; r0 != want {
		t.Errorf("first ready at %s, want %s", r0, want)
	}
	if want := 22 * time.Millisecond; r1 != want {
		t.Errorf("second ready at %s, want %s", r1, want)
	}
	// A step ending while the process is busy waits for it.
	if got, want := f.Emit(0, 5*time.Millisecond, 3), 22*time.Millisecond+130*time.Microsecond; got != want {
		t.Errorf("emit at %s, want %s", got, want)
	}
	// An idle process handles a step at once.
	if got, want := f.Emit(0, time.Second, 1), time.Second+110*time.Microsecond; got != want {
		t.Errorf("idle emit at %s, want %s", got, want)
	}
}

func TestFrontendSpreadsOverProcesses(t *testing.T) {
	f := NewFrontend(FrontendCosts{TokenizePerToken: time.Microsecond}, 4)
	for i := range 4 {
		p, r := f.Admit(0, 1000)
		if p != i || r != time.Millisecond {
			t.Errorf("request %d: process %d ready %s; want %d, 1ms", i, p, r, i)
		}
	}
	// The fifth goes to the process that frees first (all tie: the lowest index).
	if p, r := f.Admit(0, 1000); p != 0 || r != 2*time.Millisecond {
		t.Errorf("fifth: process %d ready %s; want 0, 2ms", p, r)
	}
}

func TestFrontendZeroCostsAreFree(t *testing.T) {
	f := NewFrontend(FrontendCosts{}, 0)
	if f.Processes() != 1 {
		t.Fatalf("processes %d, want 1", f.Processes())
	}
	if _, r := f.Admit(7, 13_000); r != 7 {
		t.Errorf("ready %d, want 7", r)
	}
	if d := f.Emit(0, 9, 4); d != 9 {
		t.Errorf("emit %d, want 9", d)
	}
}
