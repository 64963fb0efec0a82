package opsdoc

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// moduleRoot is the module root seen from this package's directory, where
// go test runs the test.
const moduleRoot = "../../.."

// opsDoc is the document checked, relative to the module root.
const opsDoc = "docs/OPERATIONS.md"

// mustParse are the public packages (directories relative to the module
// root) that the walk must find; they are the ones whose errors users meet.
// A walk that misses one (a moved directory, a wrong exclusion) would let
// the check pass on nothing.
var mustParse = []string{".", "processor", "state", "serde", "changelog", "kafka", "kstatetest"}

// publicErr is one exported error of a public package.
type publicErr struct {
	Name string // as the doc must write it: "kstate.ErrConfig", "serde.Error"
	Pos  string // declaration, "state/errors.go:11"
}

// Every exported error of a public package is listed in docs/OPERATIONS.md,
// and every error the document names in backticks exists.
func TestOperationsListsEveryPublicError(t *testing.T) {
	if _, err := os.Stat(filepath.Join(moduleRoot, "go.mod")); err != nil {
		t.Fatalf("module root not found at %s: %v", moduleRoot, err)
	}
	doc, err := os.ReadFile(filepath.Join(moduleRoot, opsDoc))
	if err != nil {
		t.Fatalf("read %s: %v", opsDoc, err)
	}
	errs, dirs := publicErrors(t, moduleRoot)
	for _, d := range mustParse {
		if !slices.Contains(dirs, d) {
			t.Errorf("public package %q was not parsed (parsed: %q)", d, dirs)
		}
	}
	if len(errs) == 0 {
		t.Fatal("no exported errors found in the public packages")
	}

	spans := codeSpans(string(doc))
	known := make(map[string]bool)
	var missing []string
	for _, e := range errs {
		known[e.Name] = true
		if !spans[e.Name] && !spans["*"+e.Name] {
			missing = append(missing, "`"+e.Name+"` ("+e.Pos+")")
		}
	}
	if len(missing) > 0 {
		t.Errorf("%s does not mention these exported errors as `pkg.Name` in backticks; add each "+
			"with an example message, what it means and what to do:\n\t%s",
			opsDoc, strings.Join(missing, "\n\t"))
	}

	// The other direction: a name that looks like a public error but is
	// not one is a rename or removal the document missed.
	pkgs := make(map[string]bool)
	for _, e := range errs {
		pkgs[strings.SplitN(e.Name, ".", 2)[0]] = true
	}
	var stale []string
	for s := range spans {
		name := strings.TrimPrefix(s, "*")
		m := errorLike.FindStringSubmatch(name)
		if m != nil && pkgs[m[1]] && !known[name] {
			stale = append(stale, "`"+s+"`")
		}
	}
	slices.Sort(stale)
	if len(stale) > 0 {
		t.Errorf("%s names errors that no public package declares (renamed or removed?):\n\t%s",
			opsDoc, strings.Join(stale, "\n\t"))
	}
	if !t.Failed() {
		t.Logf("%d exported errors of %d public packages, all in %s", len(errs), len(dirs), opsDoc)
	}
}

// errorLike matches a qualified name that is written like an exported
// error: pkg.ErrX or pkg.XError (and pkg.Error).
var errorLike = regexp.MustCompile(`^([a-z][a-z0-9]*)\.(Err[A-Z0-9]\w*|\w*Error)$`)

// publicErrors parses the non-test Go files of every public package under
// root and returns their exported errors (sorted by name) and the
// directories of the packages parsed.
func publicErrors(t *testing.T, root string) ([]publicErr, []string) {
	t.Helper()
	var errs []publicErr
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		rel, err := filepath.Rel(root, path)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if rel != "." && skipDir(rel, d.Name()) {
			return filepath.SkipDir
		}
		found, isPkg, err := parsePackage(path, rel)
		if err != nil {
			return err
		}
		if isPkg {
			dirs = append(dirs, rel)
			errs = append(errs, found...)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", root, err)
	}
	slices.SortFunc(errs, func(a, b publicErr) int { return strings.Compare(a.Name, b.Name) })
	return errs, dirs
}

// skipDir reports whether the directory rel (slash-separated, relative to
// the module root) holds no public package, nor any below it.
func skipDir(rel, name string) bool {
	if strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") || name == "testdata" || name == "internal" {
		return true
	}
	top := strings.SplitN(rel, "/", 2)[0]
	return top == "examples" || top == "integration" || top == "cmd"
}

// parsePackage parses the non-test .go files of dir. isPkg is false when
// there are none or the package is a main package.
func parsePackage(dir, rel string) (errs []publicErr, isPkg bool, err error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, false, err
	}
	fset := token.NewFileSet()
	for _, e := range entries {
		n := e.Name()
		if e.IsDir() || !strings.HasSuffix(n, ".go") || strings.HasSuffix(n, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, n), nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, false, err
		}
		pkg := f.Name.Name
		if pkg == "main" {
			return nil, false, nil
		}
		isPkg = true
		pos := func(p token.Pos) string {
			return filepath.ToSlash(filepath.Join(rel, n)) + ":" + strconv.Itoa(fset.Position(p).Line)
		}
		for _, decl := range f.Decls {
			gd, ok := decl.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range gd.Specs {
				switch s := spec.(type) {
				case *ast.ValueSpec:
					if gd.Tok != token.VAR {
						continue
					}
					for i, id := range s.Names {
						var val ast.Expr
						if i < len(s.Values) {
							val = s.Values[i]
						}
						if id.IsExported() && (strings.HasPrefix(id.Name, "Err") || isErrorCall(val)) {
							errs = append(errs, publicErr{Name: pkg + "." + id.Name, Pos: pos(id.Pos())})
						}
					}
				case *ast.TypeSpec:
					if s.Name.IsExported() && strings.HasSuffix(s.Name.Name, "Error") {
						errs = append(errs, publicErr{Name: pkg + "." + s.Name.Name, Pos: pos(s.Name.Pos())})
					}
				}
			}
		}
	}
	return errs, isPkg, nil
}

// isErrorCall reports whether e is errors.New(...) or fmt.Errorf(...).
func isErrorCall(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	x, ok := sel.X.(*ast.Ident)
	return ok && ((x.Name == "errors" && sel.Sel.Name == "New") || (x.Name == "fmt" && sel.Sel.Name == "Errorf"))
}

// codeSpans returns the contents of the inline code spans of a markdown
// document (fenced code blocks are skipped: a name must be mentioned in
// the prose or a table, not only in an example).
func codeSpans(md string) map[string]bool {
	var prose strings.Builder
	fenced := false
	for line := range strings.Lines(md) {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		if !fenced {
			prose.WriteString(line)
		}
	}
	out := make(map[string]bool)
	for _, m := range codeSpan.FindAllStringSubmatch(prose.String(), -1) {
		out[strings.TrimSpace(m[1])] = true
	}
	return out
}

var codeSpan = regexp.MustCompile("`([^`\n]+)`")
