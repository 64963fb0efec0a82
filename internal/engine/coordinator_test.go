package engine_test

import (
	"flag"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"testing/synctest"

	"github.com/kstate/kstate/internal/engine/enginetest"
	"github.com/kstate/kstate/internal/testlog"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the expected outputs of testdata/scenarios")

// TestCoordinatorScenarios runs the scripts in testdata/scenarios against
// the coordinator over enginetest's in-memory Kafka, inside a synctest
// bubble: no broker, no sleeps, one loop iteration per "poll".
//
// A script is a sequence of commands (see enginetest.Env.Exec); a command
// followed by a line "----" is checked: the lines after it, up to a blank
// line, are its expected output. "# partitions N" on the first line sets
// the number of input partitions (default 2). Run with -rewrite to
// regenerate the expected outputs after a deliberate change, and review
// the diff.
func TestCoordinatorScenarios(t *testing.T) {
	files, err := filepath.Glob("testdata/scenarios/*.txt")
	if err != nil || len(files) == 0 {
		t.Fatalf("no scenarios: %v", err)
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			runScript(t, file)
		})
	}
}

type step struct {
	cmd      string
	check    bool
	expected string
	comments []string // lines before the command
}

func parseScript(t *testing.T, text string) []step {
	var steps []step
	lines := strings.Split(strings.TrimRight(text, "\n"), "\n")
	var pending []string
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.TrimSpace(l) == "" || strings.HasPrefix(l, "#") {
			pending = append(pending, l)
			continue
		}
		s := step{cmd: l, comments: pending}
		pending = nil
		if i+1 < len(lines) && lines[i+1] == "----" {
			s.check = true
			i += 2
			var exp []string
			for ; i < len(lines) && lines[i] != ""; i++ {
				exp = append(exp, lines[i])
			}
			s.expected = strings.Join(exp, "\n")
			if i < len(lines) {
				pending = append(pending, "")
			}
		}
		steps = append(steps, s)
	}
	if len(pending) > 0 {
		steps = append(steps, step{comments: pending})
	}
	return steps
}

func runScript(t *testing.T, file string) {
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	text := string(b)
	partitions := 2
	if rest, ok := strings.CutPrefix(text, "# partitions "); ok {
		n, _, _ := strings.Cut(rest, "\n")
		if partitions, err = strconv.Atoi(n); err != nil {
			t.Fatalf("%s: bad partitions line", file)
		}
	}
	steps := parseScript(t, text)
	synctest.Test(t, func(t *testing.T) {
		env := enginetest.NewEnv(partitions, testlog.New(t))
		defer env.Close()
		for i := range steps {
			s := &steps[i]
			if s.cmd == "" {
				continue
			}
			got, err := env.Exec(s.cmd)
			if err != nil {
				got = "error: " + err.Error()
			}
			if !s.check {
				if err != nil {
					t.Fatalf("%s: %s: %v", file, s.cmd, err)
				}
				continue
			}
			if *rewrite {
				s.expected = got
				continue
			}
			if got != s.expected {
				t.Errorf("%s: %s\n got:\n%s\nwant:\n%s", file, s.cmd, indent(got), indent(s.expected))
			}
		}
	})
	if *rewrite {
		var out strings.Builder
		for _, s := range steps {
			for _, c := range s.comments {
				out.WriteString(c + "\n")
			}
			if s.cmd == "" {
				continue
			}
			out.WriteString(s.cmd + "\n")
			if s.check {
				out.WriteString("----\n")
				if s.expected != "" {
					out.WriteString(s.expected + "\n")
				}
			}
		}
		if err := os.WriteFile(file, []byte(out.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }
