// Command archcheck checks that the "## Where each piece lives" table of
// docs/ARCHITECTURE.md matches the packages of the module: every package
// has a row, every row names a package, and a row that lists the package's
// imports lists exactly its module-internal imports. It also checks that
// the public changelog package only decodes (CheckDecodeOnly). Its test runs the
// check in `go test ./...`; `go run ./internal/tools/archcheck` from the
// module root prints the same report.
//
// The table convention (see also TestArchitectureTable):
//
//   - The first cell names the package by its directory relative to the
//     module root, in backticks, with or without a trailing slash:
//     | `state/kv` | ... |.
//   - The root package is written "(root) `kstate`" or "`.`".
//   - One row may name several packages, e.g. a package and its test
//     helper: | `state/kv`, `state/kv/kvtest` | ... |. Each one must exist.
//   - Optionally the role cell says "imports: `state`, `changelog`" (up to
//     the next ";" or ")" or the end of the cell; "imports: none" for no
//     module-internal import). The list must equal the module-internal
//     non-test imports of the row's packages (the row's own packages left
//     out), written the same way as the first cell.
//
// Every package must have a row except packages under the top-level
// examples/, integration/ and cmd/ directories and directories holding only
// _test.go files. Internal packages, the root package and package main
// outside cmd/ (such as internal/tools/apidoc) need a row. A row may name an
// excluded package (such as `integration/` or `cmd/kstate`).
package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
)

// Heading is the markdown heading of the table.
const Heading = "## Where each piece lives"

// excludedTop are the top-level directories whose packages need no row.
var excludedTop = []string{"examples", "integration", "cmd"}

// Row is one row of the table.
type Row struct {
	Line int      // 1-based line in the markdown file
	Cell string   // first cell as written
	Dirs []string // package directories, relative and slash-separated; "." is the root
	Role string
	// HasImports says the role lists imports; Imports are their directories.
	HasImports bool
	Imports    []string
}

// Pkg is one package of the module as go list reports it.
type Pkg struct {
	ImportPath string
	Dir        string // relative to the module root, slash-separated; "." is the root
	NonTest    bool   // has non-test Go files
	Imports    []string
}

var (
	backticked = regexp.MustCompile("`([^`]*)`")
	importsRe  = regexp.MustCompile(`imports:\s*([^;)]*)`)
	rootRe     = regexp.MustCompile("\\(root\\)\\s*`[^`]*`")
)

// ParseTable returns the rows of the table under Heading in md.
func ParseTable(md string) ([]Row, error) {
	lines := strings.Split(md, "\n")
	start := slices.IndexFunc(lines, func(l string) bool { return strings.TrimSpace(l) == Heading })
	if start < 0 {
		return nil, fmt.Errorf("archcheck: no %q heading", Heading)
	}
	i := start + 1
	for i < len(lines) && strings.TrimSpace(lines[i]) == "" {
		i++
	}
	if i+1 >= len(lines) || !strings.HasPrefix(strings.TrimSpace(lines[i]), "|") ||
		strings.Trim(strings.TrimSpace(lines[i+1]), "|-: ") != "" {
		return nil, fmt.Errorf("archcheck: no table (header row, then |---|) right under %q (line %d)", Heading, start+1)
	}
	var rows []Row
	for i += 2; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "|") {
			break
		}
		cells := strings.Split(strings.TrimSuffix(strings.TrimPrefix(l, "|"), "|"), "|")
		r := Row{Line: i + 1, Cell: strings.TrimSpace(cells[0]), Dirs: splitPaths(cells[0])}
		r.Role = strings.TrimSpace(strings.Join(cells[1:], "|"))
		if m := importsRe.FindStringSubmatch(rootRe.ReplaceAllString(r.Role, "`.`")); m != nil {
			r.HasImports = true
			r.Imports = splitPaths(m[1])
		}
		rows = append(rows, r)
	}
	return rows, nil
}

// splitPaths returns the directories named in a first cell or an
// "imports:" list: the backticked items if there are any ("(root) `x`"
// counting as "`.`"), else the comma-separated items.
func splitPaths(s string) []string {
	s = rootRe.ReplaceAllString(s, "`.`")
	var items []string
	if ms := backticked.FindAllStringSubmatch(s, -1); len(ms) > 0 {
		for _, m := range ms {
			items = append(items, m[1])
		}
	} else {
		items = strings.Split(strings.TrimSuffix(strings.TrimSpace(s), "."), ",")
	}
	var dirs []string
	for _, item := range items {
		item = strings.TrimSpace(item)
		if item == "" || strings.EqualFold(item, "none") {
			continue
		}
		dirs = append(dirs, normalizeDir(item))
	}
	return dirs
}

// normalizeDir turns "./state/kv/" into "state/kv", and ".", "/" and
// "(root)" into ".".
func normalizeDir(s string) string {
	if s == "(root)" {
		return "."
	}
	s = strings.TrimPrefix(s, "./")
	s = strings.Trim(s, "/")
	if s == "" {
		return "."
	}
	return s
}

// ListPackages runs go list in the module root.
func ListPackages(root string) ([]Pkg, error) {
	mod, err := goCmd(root, "list", "-m", "-f", "{{.Path}}")
	if err != nil {
		return nil, err
	}
	modPath := strings.TrimSpace(mod)
	out, err := goCmd(root, "list", "-e", "-f",
		`{{.ImportPath}} {{len .GoFiles}} {{len .CgoFiles}} {{join .Imports " "}}`, "./...")
	if err != nil {
		return nil, err
	}
	var pkgs []Pkg
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) < 3 {
			return nil, fmt.Errorf("archcheck: unexpected go list line %q", line)
		}
		dir, ok := relDir(modPath, f[0])
		if !ok {
			return nil, fmt.Errorf("archcheck: go list gave %s, outside module %s", f[0], modPath)
		}
		p := Pkg{ImportPath: f[0], Dir: dir, NonTest: f[1] != "0" || f[2] != "0"}
		for _, imp := range f[3:] {
			if d, ok := relDir(modPath, imp); ok {
				p.Imports = append(p.Imports, d)
			}
		}
		pkgs = append(pkgs, p)
	}
	return pkgs, nil
}

// relDir returns the directory of import path ip relative to the module
// root, if ip is in the module.
func relDir(modPath, ip string) (string, bool) {
	if ip == modPath {
		return ".", true
	}
	rest, ok := strings.CutPrefix(ip, modPath+"/")
	return rest, ok
}

func goCmd(root string, args ...string) (string, error) {
	cmd := exec.Command("go", args...)
	cmd.Dir = root
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("archcheck: go %s: %w\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// needsRow says whether p must have a row in the table.
func needsRow(p Pkg) bool {
	top, _, _ := strings.Cut(p.Dir, "/")
	return p.NonTest && !slices.Contains(excludedTop, top)
}

// show writes a directory the way the table does.
func show(dir string) string {
	if dir == "." {
		return "`.` (root)"
	}
	return "`" + dir + "`"
}

// Check compares the rows with the packages and returns one message per
// problem: packages without a row (sorted), then rows naming no package,
// rows naming a package twice and import lists that differ (table order).
// root is only used to tell a missing directory from one without Go files.
func Check(root, file string, rows []Row, pkgs []Pkg) []string {
	byDir := map[string]Pkg{}
	for _, p := range pkgs {
		byDir[p.Dir] = p
	}
	covered := map[string]int{} // dir → line of its row
	var rowProblems []string
	for _, r := range rows {
		if len(r.Dirs) == 0 {
			rowProblems = append(rowProblems, fmt.Sprintf("%s:%d: row %q names no package: its first cell is empty", file, r.Line, r.Cell))
		}
		for _, d := range r.Dirs {
			if _, ok := byDir[d]; !ok {
				why := "no Go package in directory " + d
				if fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(d))); err != nil || !fi.IsDir() {
					why = "directory " + d + " does not exist"
				}
				rowProblems = append(rowProblems, fmt.Sprintf("%s:%d: row %s names no package: %s", file, r.Line, r.Cell, why))
				continue
			}
			if prev, dup := covered[d]; dup {
				rowProblems = append(rowProblems, fmt.Sprintf("%s:%d: row %s names %s again (first named on line %d)", file, r.Line, r.Cell, show(d), prev))
				continue
			}
			covered[d] = r.Line
		}
		if r.HasImports {
			if msg := checkImports(r, byDir); msg != "" {
				rowProblems = append(rowProblems, fmt.Sprintf("%s:%d: row %s: %s", file, r.Line, r.Cell, msg))
			}
		}
	}
	var missing []string
	for _, p := range pkgs {
		if _, ok := covered[p.Dir]; !ok && needsRow(p) {
			where, cell := "directory `"+p.Dir+"`", "`"+p.Dir+"`"
			if p.Dir == "." {
				where, cell = "the root package", "(root) `"+path.Base(p.ImportPath)+"`"
			}
			missing = append(missing, fmt.Sprintf("%s: package %s (%s) has no row in the %q table: add a row | %s | <role> |",
				file, p.ImportPath, where, strings.TrimPrefix(Heading, "## "), cell))
		}
	}
	slices.Sort(missing)
	return append(missing, rowProblems...)
}

// checkImports compares a row's "imports:" list with go list.
func checkImports(r Row, byDir map[string]Pkg) string {
	var got []string
	for _, d := range r.Dirs {
		p, ok := byDir[d]
		if !ok {
			return "" // reported as a row naming no package
		}
		for _, imp := range p.Imports {
			if !slices.Contains(r.Dirs, imp) {
				got = append(got, imp)
			}
		}
	}
	want := slices.Clone(r.Imports)
	slices.Sort(got)
	slices.Sort(want)
	got, want = slices.Compact(got), slices.Compact(want)
	if slices.Equal(got, want) {
		return ""
	}
	var notListed, notImported []string
	for _, d := range got {
		if !slices.Contains(want, d) {
			notListed = append(notListed, show(d))
		}
	}
	for _, d := range want {
		if !slices.Contains(got, d) {
			notImported = append(notImported, show(d))
		}
	}
	msg := fmt.Sprintf("the table says imports: %s; go list says: %s", list(want), list(got))
	if len(notListed) > 0 {
		msg += "; imported but not listed: " + strings.Join(notListed, ", ")
	}
	if len(notImported) > 0 {
		msg += "; listed but not imported: " + strings.Join(notImported, ", ")
	}
	return msg
}

func list(dirs []string) string {
	if len(dirs) == 0 {
		return "none"
	}
	s := make([]string, len(dirs))
	for i, d := range dirs {
		s[i] = show(d)
	}
	return strings.Join(s, ", ")
}

// Run checks docs/ARCHITECTURE.md of the module at root.
func Run(root string) ([]string, error) {
	const file = "docs/ARCHITECTURE.md"
	md, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(file)))
	if err != nil {
		return nil, fmt.Errorf("archcheck: %w", err)
	}
	rows, err := ParseTable(string(md))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", file, err)
	}
	pkgs, err := ListPackages(root)
	if err != nil {
		return nil, err
	}
	problems := Check(root, file, rows, pkgs)
	for _, dir := range decodeOnly {
		more, err := CheckDecodeOnly(root, dir)
		if err != nil {
			return nil, err
		}
		problems = append(problems, more...)
	}
	return problems, nil
}
