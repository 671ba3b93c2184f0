// Package testredis starts a real redis-server (Debian's package) for tests, on a
// free loopback port with persistence off, and stops it when the test ends. Where
// redis-server is missing the test skips, except under CI=true, where it fails:
// a skipped test proves nothing (.ci/run installs the package).
package testredis

import (
	"bufio"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Server is one redis-server process started for a test.
type Server struct {
	Addr  string // host:port on 127.0.0.1
	cmd   *exec.Cmd
	done  chan struct{} // closed when cmd has exited (its Wait returned)
	log   *tail         // the process's last log lines, for a failure message
	bin   string
	args  []string
	extra []string
}

// URL is the server's address as a redis:// URL (database 0).
func (s *Server) URL() string { return "redis://" + s.Addr + "/0" }

// Start runs redis-server on a free 127.0.0.1 port and waits until it answers
// PING (10 s at most). extra are further redis-server arguments (e.g.
// "--requirepass", "x"). The server is killed at t.Cleanup.
func Start(t testing.TB, extra ...string) *Server {
	t.Helper()
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("redis-server not found (CI=true: a missing Redis fails the run; apt-get install redis-server): %v", err)
		}
		t.Skipf("redis-server not found (apt-get install redis-server): %v", err)
	}
	port, err := freePort()
	if err != nil {
		t.Fatalf("finding a free port: %v", err)
	}
	args := append([]string{"--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--daemonize", "no"}, extra...)
	s := &Server{Addr: fmt.Sprintf("127.0.0.1:%d", port), bin: bin, args: args, extra: extra}
	t.Cleanup(s.Kill)
	s.run(t)
	return s
}

// Restart starts a new, empty server on the same address after Kill (a Redis
// restarted without persistence), and waits until it answers PING.
func (s *Server) Restart(t testing.TB) {
	t.Helper()
	s.Kill()
	s.run(t)
}

// run starts the process and waits for PING (10 s at most). A process that
// exits before it answers is started again until the deadline (its port can be
// briefly held by another test's listener after a Restart's Kill); a failure
// quotes its last log lines.
func (s *Server) run(t testing.TB) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	s.start(t)
	for {
		err := ping(s.Addr, s.extra)
		if err == nil {
			return
		}
		select {
		case <-s.done:
			err = fmt.Errorf("redis-server exited: %v", s.cmd.ProcessState)
			if time.Now().Before(deadline) {
				time.Sleep(100 * time.Millisecond)
				s.start(t)
				continue
			}
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("redis-server on %s did not answer PING within 10 s: %v; its log ends:\n%s", s.Addr, err, s.log.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// start runs one redis-server process with its log drained into s.log.
func (s *Server) start(t testing.TB) {
	t.Helper()
	cmd := exec.Command(s.bin, s.args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	out, _ := cmd.StdoutPipe()
	if err := cmd.Start(); err != nil {
		t.Fatalf("starting redis-server: %v", err)
	}
	s.cmd, s.done, s.log = cmd, make(chan struct{}), &tail{}
	done, log := s.done, s.log
	go func() { // drain its log so it never blocks on a full pipe
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			log.add(sc.Text())
		}
		cmd.Wait()
		close(done)
	}()
}

// Kill stops the server at once (SIGKILL) and waits for it to exit; calling it
// again does nothing.
func (s *Server) Kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.done:
		return
	default:
	}
	s.cmd.Process.Kill()
	<-s.done
}

// tail keeps the last lines of a process's log.
type tail struct {
	mu    sync.Mutex
	lines []string
}

func (l *tail) add(line string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.lines = append(l.lines, line); len(l.lines) > 8 {
		l.lines = l.lines[1:]
	}
}

func (l *tail) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

// Pause stops the server's process (SIGSTOP): it keeps its connections open and
// answers nothing until Resume, like a hung Redis.
func (s *Server) Pause() error { return s.cmd.Process.Signal(syscall.SIGSTOP) }

// Resume continues a paused server (SIGCONT).
func (s *Server) Resume() error { return s.cmd.Process.Signal(syscall.SIGCONT) }

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// ping sends an inline PING (with AUTH first when --requirepass is among extra)
// and waits for +PONG.
func ping(addr string, extra []string) error {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(time.Second))
	for i, a := range extra {
		if a == "--requirepass" && i+1 < len(extra) {
			fmt.Fprintf(c, "AUTH %s\r\n", extra[i+1])
			if l, err := bufio.NewReader(c).ReadString('\n'); err != nil || !strings.HasPrefix(l, "+OK") {
				return fmt.Errorf("AUTH: %q %v", l, err)
			}
		}
	}
	fmt.Fprint(c, "PING\r\n")
	l, err := bufio.NewReader(c).ReadString('\n')
	if err != nil {
		return err
	}
	if !strings.HasPrefix(l, "+PONG") {
		return fmt.Errorf("PING answered %q", l)
	}
	return nil
}
