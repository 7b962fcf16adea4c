package bench

import (
	"os/exec"
	"runtime"
	"syscall"
)

// dieWithParent makes the kernel kill a ceiling child when this process
// dies before it (SIGKILL, an OOM kill): a dead parent cannot enforce
// Options.Timeout. The death signal fires when the thread that started the
// child exits, so the calling goroutine stays on its thread until it calls
// the returned function, after the child was waited for.
func dieWithParent(cmd *exec.Cmd) (release func()) {
	runtime.LockOSThread()
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	return runtime.UnlockOSThread
}
