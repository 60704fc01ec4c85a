//go:build !linux

package main

import "os/exec"

// isolate does nothing outside Linux; killGroup then kills the process itself.
func isolate(*exec.Cmd) {}

// killGroup kills cmd's process.
func killGroup(cmd *exec.Cmd) error {
	if cmd.Process == nil {
		return nil
	}
	return cmd.Process.Kill()
}
