package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestArchitectureTable checks the "## Where each piece lives" table of
// docs/ARCHITECTURE.md against `go list ./...` run in the module root.
//
// Convention for the table (the package comment has the details):
//   - first cell: the package directory relative to the module root, in
//     backticks, trailing slash optional (`state/kv` or `state/`);
//   - the root package: "(root) `kstate`" or "`.`";
//   - several packages in one row only by naming each of them:
//     | `state/kv`, `state/kv/kvtest` | ... |;
//   - optional "imports: `a`, `b`" (or "imports: none") in the role cell:
//     exactly the row's module-internal non-test imports.
//
// Every package except those under examples/, integration/, cmd/ and
// test-only directories needs a row, internal ones and package main under
// internal/tools included; every row must name an existing package.
func TestArchitectureTable(t *testing.T) {
	problems, err := Run("../../..")
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}
}

const sampleMD = `# Architecture

## Where each piece lives

| package | role |
|---|---|
| (root) ` + "`kstate`" + ` | the App (imports: ` + "`processor`, `internal/engine`" + `) |
| ` + "`processor/`" + ` | programming model (imports: none) |
| ` + "`state/kv`, `state/kv/kvtest`" + ` | store and its conformance suite; imports: ` + "`processor`" + `, ` + "`state`" + ` |
| ` + "`internal/engine`" + ` | engine (imports: ` + "`processor`" + `) |
| ` + "`docs/`" + ` | not a package |
| ` + "`gone`" + ` | removed |
| ` + "`processor`" + ` | twice |
| ` + "`cmd/kstate`" + ` | the CLI |

## Next section

| a | b |
|---|---|
| ` + "`other`" + ` | not part of the table |
`

func TestParseTable(t *testing.T) {
	rows, err := ParseTable(sampleMD)
	if err != nil {
		t.Fatal(err)
	}
	type want struct {
		line       int
		dirs       []string
		hasImports bool
		imports    []string
	}
	wants := []want{
		{7, []string{"."}, true, []string{"processor", "internal/engine"}},
		{8, []string{"processor"}, true, nil},
		{9, []string{"state/kv", "state/kv/kvtest"}, true, []string{"processor", "state"}},
		{10, []string{"internal/engine"}, true, []string{"processor"}},
		{11, []string{"docs"}, false, nil},
		{12, []string{"gone"}, false, nil},
		{13, []string{"processor"}, false, nil},
		{14, []string{"cmd/kstate"}, false, nil},
	}
	if len(rows) != len(wants) {
		t.Fatalf("got %d rows, want %d: %+v", len(rows), len(wants), rows)
	}
	for i, w := range wants {
		r := rows[i]
		if r.Line != w.line || !slices.Equal(r.Dirs, w.dirs) || r.HasImports != w.hasImports || !slices.Equal(r.Imports, w.imports) {
			t.Errorf("row %d = %+v, want %+v", i, r, w)
		}
	}
	for _, md := range []string{"# no table\n", "## Where each piece lives\n\ntext, no table\n"} {
		if _, err := ParseTable(md); err == nil {
			t.Errorf("ParseTable(%q) gave no error", md)
		}
	}
}

func TestCheck(t *testing.T) {
	root := t.TempDir()
	for _, d := range []string{"docs", "processor", "state/kv/kvtest", "internal/engine", "internal/other", "examples/x", "integration"} {
		if err := os.MkdirAll(filepath.Join(root, filepath.FromSlash(d)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	rows, err := ParseTable(sampleMD)
	if err != nil {
		t.Fatal(err)
	}
	const m = "example.com/m"
	pkgs := []Pkg{
		{ImportPath: m, Dir: ".", NonTest: true, Imports: []string{"processor", "internal/engine"}},
		{ImportPath: m + "/processor", Dir: "processor", NonTest: true},
		{ImportPath: m + "/state/kv", Dir: "state/kv", NonTest: true, Imports: []string{"state"}},
		{ImportPath: m + "/state/kv/kvtest", Dir: "state/kv/kvtest", NonTest: true, Imports: []string{"state/kv"}},
		{ImportPath: m + "/internal/engine", Dir: "internal/engine", NonTest: true, Imports: []string{"processor", "state"}},
		{ImportPath: m + "/internal/other", Dir: "internal/other", NonTest: true},
		{ImportPath: m + "/examples/x", Dir: "examples/x", NonTest: true},
		{ImportPath: m + "/integration", Dir: "integration", NonTest: false},
		{ImportPath: m + "/cmd/kstate", Dir: "cmd/kstate", NonTest: true},
		{ImportPath: m + "/onlytests", Dir: "onlytests", NonTest: false},
	}
	got := Check(root, "ARCH.md", rows, pkgs)
	wantSubs := [][]string{
		{"ARCH.md: package example.com/m/internal/other (directory `internal/other`) has no row in the \"Where each piece lives\" table: add a row | `internal/other` | <role> |"},
		{"ARCH.md:9: row", "the table says imports: `processor`, `state`; go list says: `state`", "listed but not imported: `processor`"},
		{"ARCH.md:10: row `internal/engine`", "imported but not listed: `state`"},
		{"ARCH.md:11: row `docs/` names no package: no Go package in directory docs"},
		{"ARCH.md:12: row `gone` names no package: directory gone does not exist"},
		{"ARCH.md:13: row `processor` names `processor` again (first named on line 8)"},
	}
	if len(got) != len(wantSubs) {
		t.Fatalf("got %d problems, want %d:\n%s", len(got), len(wantSubs), strings.Join(got, "\n"))
	}
	for i, subs := range wantSubs {
		for _, s := range subs {
			if !strings.Contains(got[i], s) {
				t.Errorf("problem %d = %q, want it to contain %q", i, got[i], s)
			}
		}
	}
}

// An exported encoder in a decode-only package is reported; decoders,
// methods and unexported functions are not.
func TestCheckDecodeOnly(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "changelog")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	src := `package changelog

type Key struct{}

func DecodeKey(b []byte) (Key, error) { return Key{}, nil }
func (k Key) String() string          { return "" }
func flip(v int64) uint64             { return uint64(v) }
func StateKey(id uint32) []byte       { return nil }
`
	if err := os.WriteFile(filepath.Join(dir, "key.go"), []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "key_test.go"), []byte("package changelog\n\nfunc EncodeForTest() {}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	problems, err := CheckDecodeOnly(root, "changelog")
	if err != nil {
		t.Fatal(err)
	}
	if len(problems) != 1 || !strings.Contains(problems[0], "changelog/key.go:8: StateKey is exported") {
		t.Fatalf("problems %q, want one for StateKey", problems)
	}
}
