package proxybench

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/lmwarden/warden/internal/wire"
)

// Names of the targets in the results.
const (
	Direct = "direct"
	Warden = "warden"
	// WardenBase is a second warden binary (Options.Baseline) measured in the
	// same run, for before/after figures side by side.
	WardenBase = "warden-base"
	Nginx      = "nginx"
	HAProxy    = "haproxy"
)

// target is one way to reach the stub: direct, or through one proxy process.
type target struct {
	name    string
	base    func(key string) string // base URL for a request of session key
	cmd     *exec.Cmd               // nil for direct
	pids    []int                   // processes whose CPU counts (the proxy's master and workers)
	config  string                  // config file or command line, kept with the results
	version string
	logPath string
	// idlePerMin is CPU seconds per minute with no traffic (measureIdle).
	idlePerMin float64
}

// directTarget sends each session to one stub replica picked by a hash of its
// key, as a hashing proxy would.
func directTarget(st *stub) *target {
	return &target{name: Direct, version: "-", base: func(key string) string {
		h := fnv.New32a()
		h.Write([]byte(key))
		return "http://" + st.addrs[int(h.Sum32())%len(st.addrs)]
	}}
}

// freePort returns a loopback host:port nothing listens on right now.
func freePort() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// start runs cmd with its output in logPath, waits for addr's /health and
// records the processes to account.
func (t *target) start(ctx context.Context, addr string) error {
	lf, err := os.Create(t.logPath)
	if err != nil {
		return err
	}
	defer lf.Close()
	t.cmd.Stdout, t.cmd.Stderr = lf, lf
	if err := t.cmd.Start(); err != nil {
		return fmt.Errorf("%s: starting %s: %w", t.name, t.cmd.Path, err)
	}
	exited := make(chan error, 1)
	go func() { exited <- t.cmd.Wait() }()
	hctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case err := <-exited:
			exited <- err
			cancel()
		case <-hctx.Done():
		}
	}()
	if err := waitHealthy(hctx, "http://"+addr+wire.PathHealth, 15*time.Second); err != nil {
		t.stop()
		log, _ := os.ReadFile(t.logPath)
		return fmt.Errorf("%s did not come up: %w; its output:\n%s", t.name, err, log)
	}
	pids, err := processTree(t.cmd.Process.Pid)
	if err != nil {
		t.stop()
		return err
	}
	t.pids = pids
	t.base = func(string) string { return "http://" + addr }
	return nil
}

// stop sends SIGTERM and waits up to 10 s, then kills.
func (t *target) stop() {
	if t.cmd == nil || t.cmd.Process == nil {
		return
	}
	p := t.cmd.Process
	p.Signal(syscall.SIGTERM)
	for range 100 {
		if err := p.Signal(syscall.Signal(0)); err != nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	p.Kill()
}

// wardenTarget runs exe route (or, with profile set, exe proxybench
// profile-route writing profiles into that directory) in front of the stub's
// replicas with default settings: affinity on, the default policy, keyed on
// X-Session-ID among the default session headers.
func wardenTarget(name, exe string, st *stub, work, profile string) (*target, string, error) {
	addr, err := freePort()
	if err != nil {
		return nil, "", err
	}
	admin, err := freePort()
	if err != nil {
		return nil, "", err
	}
	args := []string{"route", "--listen", addr, "--admin-listen", admin, "--seed", "1"}
	for _, a := range st.addrs {
		args = append(args, "--replica", "http://"+a)
	}
	if profile != "" {
		args = append([]string{"proxybench", "profile-route", "--dir", profile, "--"}, args...)
	}
	cmd := exec.Command(exe, args...)
	out, _ := exec.Command(exe, "version").Output()
	return &target{name: name, cmd: cmd, config: exe + " " + strings.Join(args, " "),
		version: strings.TrimSpace(string(out)), logPath: filepath.Join(work, name+".log")}, addr, nil
}

// peerSetup finds a peer's binary, picks its listen address and writes one
// config line per stub replica with line(index, host:port).
func peerSetup(name string, st *stub, line func(int, string) string) (bin, addr, servers string, err error) {
	if bin, err = exec.LookPath(name); err != nil {
		return "", "", "", err
	}
	if addr, err = freePort(); err != nil {
		return "", "", "", err
	}
	var b strings.Builder
	for i, a := range st.addrs {
		b.WriteString(line(i, a))
	}
	return bin, addr, b.String(), nil
}

// nginxTarget runs nginx (Debian's nginx 1.22 here) with consistent hashing on
// the session header, keep-alive upstream connections and no buffering in
// either direction, one worker per core.
func nginxTarget(st *stub, work string) (*target, string, error) {
	bin, addr, servers, err := peerSetup("nginx", st, func(_ int, a string) string { return "    server " + a + ";\n" })
	if err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`# proxybench: nginx in front of the stub replicas
daemon off;
master_process on;
worker_processes auto;
pid %[1]s/nginx.pid;
error_log %[1]s/nginx-error.log warn;
events { worker_connections 8192; }
http {
  access_log off;
  client_body_temp_path %[1]s/nginx-body;
  proxy_temp_path %[1]s/nginx-proxy;
  fastcgi_temp_path %[1]s/nginx-fastcgi;
  uwsgi_temp_path %[1]s/nginx-uwsgi;
  scgi_temp_path %[1]s/nginx-scgi;
  upstream stub {
    hash $http_x_session_id consistent;
%[2]s    keepalive 512;
  }
  server {
    listen %[3]s;
    location / {
      proxy_pass http://stub;
      proxy_http_version 1.1;
      proxy_set_header Connection "";
      proxy_buffering off;
      proxy_request_buffering off;
      proxy_read_timeout 120s;
    }
  }
}
`, work, servers, addr)
	path := filepath.Join(work, "nginx.conf")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	out, _ := exec.Command(bin, "-v").CombinedOutput()
	cmd := exec.Command(bin, "-p", work, "-c", path, "-e", filepath.Join(work, "nginx-error.log"))
	return &target{name: Nginx, cmd: cmd, config: conf, version: strings.TrimSpace(string(out)),
		logPath: filepath.Join(work, "nginx.log")}, addr, nil
}

// haproxyTarget runs HAProxy (Debian's 2.6 here) in one process with a thread
// per core, hashing the session header consistently, reusing idle server
// connections, with http-no-delay (without it HAProxy holds small SSE writes
// back; docs/router.md).
func haproxyTarget(st *stub, work string) (*target, string, error) {
	bin, addr, servers, err := peerSetup("haproxy", st, func(i int, a string) string { return fmt.Sprintf("    server r%d %s\n", i, a) })
	if err != nil {
		return nil, "", err
	}
	conf := fmt.Sprintf(`# proxybench: HAProxy in front of the stub replicas
global
    nbthread %[1]d
    maxconn 8000
defaults
    mode http
    option http-no-delay
    timeout connect 5s
    timeout client 120s
    timeout server 120s
    http-reuse always
frontend pb
    bind %[2]s
    default_backend stub
backend stub
    balance hdr(%[3]s)
    hash-type consistent
%[4]s`, numCPU(), addr, HeaderSession, servers)
	path := filepath.Join(work, "haproxy.cfg")
	if err := os.WriteFile(path, []byte(conf), 0o644); err != nil {
		return nil, "", err
	}
	out, _ := exec.Command(bin, "-v").Output()
	ver, _, _ := strings.Cut(string(out), "\n")
	cmd := exec.Command(bin, "-db", "-f", path)
	return &target{name: HAProxy, cmd: cmd, config: conf, version: strings.TrimSpace(ver),
		logPath: filepath.Join(work, "haproxy.log")}, addr, nil
}

// processTree is pid and its children (nginx's workers), from /proc.
func processTree(pid int) ([]int, error) {
	pids := []int{pid}
	ents, err := os.ReadDir("/proc")
	if err != nil {
		return nil, fmt.Errorf("listing /proc: %w", err)
	}
	for _, e := range ents {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == pid {
			continue
		}
		f, err := statFields(p)
		if err != nil {
			continue // gone meanwhile
		}
		if ppid, _ := strconv.Atoi(f[1]); ppid == pid {
			pids = append(pids, p)
		}
	}
	return pids, nil
}

// statFields are the fields of /proc/PID/stat after the command name: f[0] is
// the state (field 3 of proc(5)), so field n is f[n-3].
func statFields(pid int) ([]string, error) {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return nil, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, errors.New("/proc/" + strconv.Itoa(pid) + "/stat: no ')' after the command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("/proc/%d/stat: %d fields after the name, want at least 13", pid, len(f))
	}
	return f, nil
}

// clockTicks is USER_HZ, the unit of utime and stime in /proc/PID/stat: 100 on
// every Linux architecture Go supports (the kernel's exported constant; proc(5)).
const clockTicks = 100

// cpuSeconds is utime and stime of pids (proc(5) fields 14 and 15) in seconds.
func cpuSeconds(pids []int) (user, sys float64, err error) {
	var ut, st int64
	for _, p := range pids {
		f, err := statFields(p)
		if err != nil {
			return 0, 0, fmt.Errorf("reading CPU time of process %d: %w", p, err)
		}
		u, err1 := strconv.ParseInt(f[11], 10, 64)
		s, err2 := strconv.ParseInt(f[12], 10, 64)
		if err := errors.Join(err1, err2); err != nil {
			return 0, 0, fmt.Errorf("/proc/%d/stat utime/stime: %w", p, err)
		}
		ut, st = ut+u, st+s
	}
	return float64(ut) / clockTicks, float64(st) / clockTicks, nil
}
