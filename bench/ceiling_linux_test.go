package bench

import (
	"bufio"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCeilingChildDiesWithHarness: when the harness process is killed
// outright (no chance to kill its children), the kernel kills its ceiling
// child too (Linux's parent-death signal): nothing is left running.
func TestCeilingChildDiesWithHarness(t *testing.T) {
	t.Setenv(childEnv, "harness")
	cmd := exec.Command(os.Args[0])
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })

	// The grandchild's announcement comes through the harness's stderr.
	found := make(chan int, 1)
	go func() {
		re := regexp.MustCompile(`hanging child (\d+) started`)
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			if m := re.FindStringSubmatch(sc.Text()); m != nil {
				n, _ := strconv.Atoi(m[1])
				found <- n
				break
			}
		}
		for sc.Scan() { // keep draining
		}
	}()
	var pid int
	select {
	case pid = <-found:
	case <-time.After(time.Minute):
		t.Fatal("the ceiling child did not start")
	}
	// A pidfd names the grandchild itself (its pid cannot be reused while
	// the fd is open) and becomes readable when it exits.
	pidfd, _, errno := syscall.Syscall(sysPidfdOpen, uintptr(pid), 0, 0)
	require.Zero(t, errno, "pidfd_open(%d)", pid)
	defer syscall.Close(int(pidfd))
	t.Cleanup(func() { _ = syscall.Kill(pid, syscall.SIGKILL) })

	require.NoError(t, cmd.Process.Kill())
	_ = cmd.Wait()

	fd := int(pidfd)
	var set syscall.FdSet
	set.Bits[fd/64] |= 1 << (uint(fd) % 64)
	tv := syscall.Timeval{Sec: 60}
	n, err := syscall.Select(fd+1, &set, nil, nil, &tv)
	require.NoError(t, err)
	require.Equal(t, 1, n, "the ceiling child %d still runs 60s after its harness was killed", pid)
}

// sysPidfdOpen is pidfd_open(2)'s number (the same on every Linux
// architecture since 5.3).
const sysPidfdOpen = 434
