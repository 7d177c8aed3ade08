package clustertest

import (
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Process is a binary started by a test, logging to <dir>/<name>.log.
type Process struct {
	Log    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// StartProcess runs a binary until the test ends, with env added to the
// test's environment. When the test fails, the tail of its log is printed.
func StartProcess(t testing.TB, dir, name, path string, env []string, args ...string) *Process {
	t.Helper()
	logFile, err := os.OpenFile(filepath.Join(dir, name+".log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(path, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = append(os.Environ(), env...)
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &Process{Log: logFile.Name(), cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); logFile.Close(); close(p.exited) }()
	t.Cleanup(func() {
		p.Kill()
		if t.Failed() {
			b, _ := os.ReadFile(p.Log)
			if len(b) > 6000 {
				b = b[len(b)-6000:]
			}
			t.Logf("%s log (tail):\n%s", name, b)
		}
	})
	return p
}

// AwaitReady polls url with client until it answers 200, for up to
// timeout; the test fails at once if the process exits first.
func (p *Process) AwaitReady(t testing.TB, client *http.Client, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		resp, err := client.Get(url)
		ok := err == nil && resp.StatusCode == http.StatusOK
		if err == nil {
			resp.Body.Close()
		}
		select {
		case <-p.exited:
			// Whoever answered, it was not this process.
			t.Fatalf("%s exited before it was ready (log: %s)", filepath.Base(p.cmd.Path), p.Log)
		default:
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s not ready after %v: %v", filepath.Base(p.cmd.Path), url, timeout, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// Kill stops the process with SIGKILL, by its PID, and waits for it.
func (p *Process) Kill() {
	_ = p.cmd.Process.Kill()
	<-p.exited
}

// Stop asks the process to shut down with SIGTERM and waits for it, up to
// grace; then it is killed. It reports whether it stopped by itself.
func (p *Process) Stop(grace time.Duration) bool {
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		return true
	case <-time.After(grace):
		p.Kill()
		return false
	}
}
