package chaos

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Engine is one `differential run` process.
type Engine struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when the process has exited
	err    error         // its exit, set before exited is closed

	mu      sync.Mutex
	lines   []string // the last log lines
	metrics string   // the /metrics and /healthz address, once logged
	log     *os.File // every line, when LogDir is set
}

// engineTail is how many log lines an Engine keeps for a failure message.
const engineTail = 60

// StartEngine starts bin with args (bin run …, logging JSON to stderr) and
// reads its log: the address it serves /healthz on comes from its
// "serving /metrics and /healthz" line. env is added to the suite's
// environment. logPath, if not empty, receives every log line.
func StartEngine(bin string, args, env []string, logPath string) (*Engine, error) {
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), env...)
	stderr, err := cmd.StderrPipe()
	if err != nil {
		return nil, err
	}
	e := &Engine{cmd: cmd, exited: make(chan struct{})}
	if logPath != "" {
		if e.log, err = os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644); err != nil {
			return nil, err
		}
	}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s: %w", bin, err)
	}
	go func() {
		sc := bufio.NewScanner(stderr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			e.add(sc.Text())
		}
		e.err = cmd.Wait()
		if e.log != nil {
			_ = e.log.Close()
		}
		close(e.exited)
	}()
	return e, nil
}

func (e *Engine) add(line string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.log != nil {
		_, _ = e.log.WriteString(line + "\n")
	}
	if e.metrics == "" && strings.Contains(line, "serving /metrics and /healthz") {
		var l struct{ Addr string }
		if json.Unmarshal([]byte(line), &l) == nil {
			e.metrics = l.Addr
		}
	}
	if strings.Contains(line, `"msg":"record dead-lettered"`) {
		return // expected for every invalid record; the tail is for what went wrong
	}
	e.lines = append(e.lines, line)
	if len(e.lines) > engineTail {
		e.lines = e.lines[1:]
	}
}

// Pid is the process id.
func (e *Engine) Pid() int { return e.cmd.Process.Pid }

// MetricsAddr is the host:port of /healthz and /metrics, "" until logged.
func (e *Engine) MetricsAddr() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.metrics
}

// Tail returns the last log lines.
func (e *Engine) Tail() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strings.Join(e.lines, "\n")
}

// Exited is closed when the process has exited.
func (e *Engine) Exited() <-chan struct{} { return e.exited }

// Err is the process's exit (nil: status 0); valid once Exited is closed.
func (e *Engine) Err() error { return e.err }

// Kill SIGKILLs the process and waits for it.
func (e *Engine) Kill() error {
	if err := e.cmd.Process.Signal(syscall.SIGKILL); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	<-e.exited
	return nil
}

// Stop sends SIGTERM and waits up to timeout for the clean stop the CLI
// promises: in-flight records finish, every partition commits, exit 0.
func (e *Engine) Stop(timeout time.Duration) error {
	if err := e.cmd.Process.Signal(syscall.SIGTERM); err != nil && !errors.Is(err, os.ErrProcessDone) {
		return err
	}
	select {
	case <-e.exited:
	case <-time.After(timeout):
		_ = e.Kill()
		return fmt.Errorf("differential run (pid %d) did not exit within %s of SIGTERM; killed", e.Pid(), timeout)
	}
	if e.err != nil {
		return fmt.Errorf("differential run (pid %d) exited after SIGTERM with %w, want status 0", e.Pid(), e.err)
	}
	return nil
}
