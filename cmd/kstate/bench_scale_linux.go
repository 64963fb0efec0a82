package main

import (
	"os/exec"
	"syscall"
)

// dieWithParent makes the kernel SIGKILL the instance if the benchmark
// dies without stopping it (SIGKILLed itself), so that no instance is left
// running.
func dieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
