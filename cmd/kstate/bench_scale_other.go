//go:build !linux

package main

import "os/exec"

// dieWithParent: no parent-death signal outside Linux; the benchmark kills
// its instances when it returns or is interrupted.
func dieWithParent(*exec.Cmd) {}
