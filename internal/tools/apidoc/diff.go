package main

import (
	"fmt"
	"strings"
)

// lineDiff returns the lines that differ between old and new, as "-" and
// "+" lines under "@@ old line N" markers (a longest-common-subsequence
// diff without context), or "" if they are equal.
func lineDiff(oldName, newName, old, new string) string {
	if old == new {
		return ""
	}
	a := strings.Split(old, "\n")
	b := strings.Split(new, "\n")
	// lcs[i][j] is the length of the longest common subsequence of a[i:] and b[j:].
	lcs := make([][]int, len(a)+1)
	for i := range lcs {
		lcs[i] = make([]int, len(b)+1)
	}
	for i := len(a) - 1; i >= 0; i-- {
		for j := len(b) - 1; j >= 0; j-- {
			if a[i] == b[j] {
				lcs[i][j] = lcs[i+1][j+1] + 1
			} else {
				lcs[i][j] = max(lcs[i+1][j], lcs[i][j+1])
			}
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "--- %s\n+++ %s\n", oldName, newName)
	inHunk := false
	i, j := 0, 0
	for i < len(a) || j < len(b) {
		switch {
		case i < len(a) && j < len(b) && a[i] == b[j]:
			inHunk = false
			i++
			j++
			continue
		case i < len(a) && (j == len(b) || lcs[i+1][j] >= lcs[i][j+1]):
			if !inHunk {
				fmt.Fprintf(&out, "@@ %s line %d\n", oldName, i+1)
				inHunk = true
			}
			fmt.Fprintf(&out, "-%s\n", a[i])
			i++
		default:
			if !inHunk {
				fmt.Fprintf(&out, "@@ %s line %d\n", oldName, i+1)
				inHunk = true
			}
			fmt.Fprintf(&out, "+%s\n", b[j])
			j++
		}
	}
	return out.String()
}
