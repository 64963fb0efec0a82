package main

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// moduleRoot is the module root seen from this package's directory.
const moduleRoot = "../../.."

// TestAPIDocUpToDate fails when docs/API.md does not match the source, so
// that CI catches a public API change nobody regenerated the file for.
func TestAPIDocUpToDate(t *testing.T) {
	modPath, pkgs, err := Generate(moduleRoot)
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(moduleRoot, "docs", "API.md")
	if _, err := os.Stat(file); errors.Is(err, fs.ErrNotExist) && os.Getenv("KSTATE_APIDOC_BOOTSTRAP") == "1" {
		t.Skipf("docs/API.md does not exist yet (KSTATE_APIDOC_BOOTSTRAP=1): create it with `%s`", regenerate)
	}
	if err := Check(file, "docs/API.md", Markdown(modPath, pkgs)); err != nil {
		t.Fatal(err)
	}
}

// writeFiles writes name → content files under dir.
func writeFiles(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func TestGenerateSelectsPublicPackages(t *testing.T) {
	root := t.TempDir()
	pkg := func(name string) string { return "package " + name + "\n\nfunc F() {}\n" }
	writeFiles(t, root, map[string]string{
		"go.mod":                       "module example.com/m // the module\n\ngo 1.22\n",
		"root.go":                      pkg("m"),
		"pub/a.go":                     pkg("pub"),
		"pub/pubtest/a.go":             pkg("pubtest"),
		"pub/internal/x/a.go":          pkg("x"),
		"internal/y/a.go":              pkg("y"),
		"examples/e/a.go":              pkg("e"),
		"integration/i/a.go":           pkg("i"),
		"cmd/tool/main.go":             pkg("main"),
		"tools/gen/main.go":            pkg("main"),
		"onlytests/a_test.go":          pkg("onlytests"),
		"pub/testdata/a.go":            pkg("testdata"),
		"nested/go.mod":                "module example.com/nested\n",
		"nested/a.go":                  pkg("nested"),
		"doc/readme.txt":               "no Go here",
		"withtests/a.go":               pkg("withtests"),
		"withtests/a_test.go":          "package withtests\n\nfunc TestOnly() {}\n",
		"withtests/x_test.go":          "package withtests_test\n\nfunc XTestOnly() {}\n",
		"pub/other/internal_name.go":   pkg("other"),
		"pub/other/ignored_windows.go": "package other\n\nfunc WindowsOnly() {}\n",
	})
	modPath, pkgs, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if modPath != "example.com/m" {
		t.Errorf("module path %q, want example.com/m", modPath)
	}
	got := CountTable(pkgs)
	want := "example.com/m\t1\n" +
		"example.com/m/pub\t1\n" +
		"example.com/m/pub/other\t1\n" +
		"example.com/m/pub/pubtest\t1\n" +
		"example.com/m/withtests\t1\n" +
		"total\t5\n"
	if got != want {
		t.Errorf("CountTable:\n%s\nwant:\n%s", got, want)
	}
}

func TestRender(t *testing.T) {
	root := t.TempDir()
	writeFiles(t, root, map[string]string{
		"go.mod": "module example.com/m\n",
		"lib/a.go": `package lib

import (
	"context"
	"errors"
	"io"
	"sync"
)

// Mode is documented; comments must not leak into the listing.
type Mode int

const (
	ModeA Mode = iota // trailing comment
	ModeB
	modeHidden
	ModeC
)

const (
	Untyped    = 1 << 3
	Converted  = int64(-1)
	x, Y       = 1, "y"
)

var (
	ErrThing   = errors.New("lib: thing")
	Default    = Config[string]{}
	Ptr        = &Config[int]{}
	Answer     = 42
	Computed   = compute()
	hiddenVar  = 1
	A, B   int = 1, 2
)

func compute() int { return 1 }

// Config is generic.
type Config[T any, K comparable] struct {
	Name, Alias string ` + "`json:\"name\"`" + `
	hidden      int
	*Base
	sync.Mutex
	inner
	Nested struct {
		X int
		Y string
	}
	Fn func(
		ctx context.Context,
		v T,
	) (K, error)
}

type Base struct{ ID int }

type inner struct{ Promoted int }

func (inner) PromotedMethod() {}

// New returns a Config.
func New[T any, K comparable](name string, opts ...func(*Config[T, K])) (*Config[T, K], error) {
	return nil, nil
}

func (c *Config[T, K]) Run(ctx context.Context) error { return nil }
func (c *Config[T, K]) hidden2()                         {}
func (Config[T, K]) Value() T                            { var v T; return v }

type Codec[T any] interface {
	Encode(v T) ([]byte, error)
	Decode([]byte) (T, error)
	io.Closer
	hiddenMethod()
}

type Number interface {
	~int | ~int64
}

type Alias = Base

type Func func(int) error

type hiddenType struct{}

func (hiddenType) Exported() {}

func helper() {}
`,
		"lib/b.go": `package lib

func Zeta() {}

func Alpha(a, b int,
	c string) (n int, err error) {
	return 0, nil
}
`,
		"lib/b_test.go": "package lib\n\nfunc TestHelperExported() {}\n",
	})
	_, pkgs, err := Generate(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) != 1 || pkgs[0].ImportPath != "example.com/m/lib" {
		t.Fatalf("packages %v, want only example.com/m/lib", pkgs)
	}
	var b strings.Builder
	for _, l := range pkgs[0].Lines {
		b.WriteString(l.Text + "\n")
	}
	want := `const Converted int64
const ModeA Mode
const ModeB Mode
const ModeC Mode
const Untyped
const Y
var A int
var Answer int
var B int
var Computed
var Default Config[string]
var ErrThing error
var Ptr *Config[int]
func Alpha(a, b int, c string) (n int, err error)
func New[T any, K comparable](name string, opts ...func(*Config[T, K])) (*Config[T, K], error)
func Zeta()
type Alias = Base
type Base struct
  Base.ID int
type Codec[T any] interface
  Codec.Encode(v T) ([]byte, error)
  Codec.Decode([]byte) (T, error)
  Codec.Closer (embedded io.Closer)
type Config[T any, K comparable] struct
  Config.Name string
  Config.Alias string
  Config.Base (embedded *Base)
  Config.Mutex (embedded sync.Mutex)
  Config.Nested struct{ X int; Y string }
  Config.Fn func(ctx context.Context, v T) (K, error)
func (c *Config[T, K]) Run(ctx context.Context) error
func (Config[T, K]) Value() T
type Func func(int) error
type Mode int
type Number interface
  Number (type set) ~int | ~int64
`
	if got := b.String(); got != want {
		t.Errorf("listing differs:\n%s", lineDiff("want", "got", want, got))
	}
	// 36 lines, of which the type-set line is not an identifier.
	if got := pkgs[0].Count(); got != 35 {
		t.Errorf("Count() = %d, want 35", got)
	}
	md := string(Markdown("example.com/m", pkgs))
	for _, s := range []string{
		"DO NOT EDIT",
		"go run ./internal/tools/apidoc",
		"| `example.com/m/lib` | 35 |\n| **total** | **35** |\n",
		"\n## example.com/m/lib\n\n```\nconst Converted int64\n",
	} {
		if !strings.Contains(md, s) {
			t.Errorf("markdown lacks %q:\n%s", s, md)
		}
	}
}

func TestCheck(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "API.md")
	md := []byte("a\nb\nc\n")
	err := Check(file, "docs/API.md", md)
	if err == nil || !strings.Contains(err.Error(), "docs/API.md does not exist: run `go run ./internal/tools/apidoc`") {
		t.Fatalf("missing file: %v", err)
	}
	writeFiles(t, dir, map[string]string{"API.md": "a\nB\nc\nd\n"})
	err = Check(file, "docs/API.md", md)
	if err == nil {
		t.Fatal("stale file passed the check")
	}
	for _, s := range []string{"docs/API.md is out of date: run `go run ./internal/tools/apidoc`", "\n-B\n+b\n", "\n-d\n"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error lacks %q:\n%v", s, err)
		}
	}
	writeFiles(t, dir, map[string]string{"API.md": string(md)})
	if err := Check(file, "docs/API.md", md); err != nil {
		t.Fatalf("up-to-date file: %v", err)
	}
}

func TestLineDiff(t *testing.T) {
	if d := lineDiff("a", "b", "x\ny\n", "x\ny\n"); d != "" {
		t.Errorf("equal inputs gave %q", d)
	}
	got := lineDiff("old", "new", "1\n2\n3\n4\n", "1\n3\nnew\n4\n5\n")
	want := "--- old\n+++ new\n@@ old line 2\n-2\n@@ old line 4\n+new\n@@ old line 5\n+5\n"
	if got != want {
		t.Errorf("lineDiff:\n%s\nwant:\n%s", got, want)
	}
}
