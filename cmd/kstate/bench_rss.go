package main

import (
	"bufio"
	"os"
	"strconv"
	"strings"
)

// peakRSS returns the process's peak resident set size in bytes (VmHWM in
// /proc/self/status), or 0 where there is no /proc (not Linux). The broker
// of `kstate bench` is another process (a JVM) and is not counted; the
// input producer and output consumer run in this process and are.
func peakRSS() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				return 0
			}
			return kb << 10
		}
	}
	return 0
}
