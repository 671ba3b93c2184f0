package testredis

import (
	"net"
	"testing"
	"time"
)

func TestStartPauseResume(t *testing.T) {
	s := Start(t)
	if err := ping(s.Addr, nil); err != nil {
		t.Fatalf("PING: %v", err)
	}
	if err := s.Pause(); err != nil {
		t.Fatal(err)
	}
	if err := ping(s.Addr, nil); err == nil {
		t.Fatal("a paused redis-server answered PING")
	}
	if err := s.Resume(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for ping(s.Addr, nil) != nil {
		if time.Now().After(deadline) {
			t.Fatal("no PONG after Resume")
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.Kill()
	if err := ping(s.Addr, nil); err == nil {
		t.Fatal("a killed redis-server answered PING")
	}
}

func TestStartWithPassword(t *testing.T) {
	s := Start(t, "--requirepass", "sekret")
	if err := ping(s.Addr, nil); err == nil {
		t.Fatal("PING without AUTH accepted by a server with requirepass")
	}
	if err := ping(s.Addr, []string{"--requirepass", "sekret"}); err != nil {
		t.Fatalf("PING after AUTH: %v", err)
	}
}

// TestRestartWhilePortBrieflyHeld: after Kill another listener holds the port for
// 500 ms (as a parallel test's server can on a loaded machine); Restart must
// still bring Redis back on the same address. The first redis-server started
// exits at once ("Address already in use"); the old code then pinged the dead
// port for 10 s and failed.
func TestRestartWhilePortBrieflyHeld(t *testing.T) {
	s := Start(t)
	s.Kill()
	l, err := net.Listen("tcp", s.Addr)
	if err != nil {
		t.Fatalf("holding %s: %v", s.Addr, err)
	}
	go func() {
		time.Sleep(500 * time.Millisecond)
		l.Close()
	}()
	s.Restart(t)
	if err := ping(s.Addr, nil); err != nil {
		t.Fatalf("after Restart: %v", err)
	}
}
