//go:build linux

package main

import (
	"os/exec"
	"syscall"
)

// isolate runs cmd in its own process group, killed with SIGKILL if livecheck dies first, so that
// nothing it starts can outlive it.
func isolate(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// killGroup kills the process group that isolate gave cmd.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
}
