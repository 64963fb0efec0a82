package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"sort"
	"strings"
)

// decodeOnly are the public packages that only read a format kstate
// writes: their exported functions decode ("Decode…"). The encoders the
// engine writes with stay internal (internal/changelogfmt), so that the
// engine never writes through a public encoder and the format can evolve
// behind its version.
var decodeOnly = []string{"changelog"}

// CheckDecodeOnly reports every exported function (not method) of the
// package in dir (relative to root) whose name does not start with
// "Decode".
func CheckDecodeOnly(root, dir string) ([]string, error) {
	ents, err := os.ReadDir(filepath.Join(root, filepath.FromSlash(dir)))
	if err != nil {
		return nil, fmt.Errorf("archcheck: %w", err)
	}
	var problems []string
	fset := token.NewFileSet()
	for _, e := range ents {
		name := e.Name()
		if e.IsDir() || !strings.HasSuffix(name, ".go") || strings.HasSuffix(name, "_test.go") {
			continue
		}
		path := filepath.Join(root, filepath.FromSlash(dir), name)
		f, err := parser.ParseFile(fset, path, nil, parser.SkipObjectResolution)
		if err != nil {
			return nil, fmt.Errorf("archcheck: %w", err)
		}
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv != nil || !fd.Name.IsExported() || strings.HasPrefix(fd.Name.Name, "Decode") {
				continue
			}
			problems = append(problems, fmt.Sprintf("%s/%s:%d: %s is exported by package %s, which only decodes: "+
				"encoders belong in internal/ (internal/changelogfmt), so that nothing writes through a public encoder",
				dir, name, fset.Position(fd.Pos()).Line, fd.Name.Name, dir))
		}
	}
	sort.Strings(problems)
	return problems, nil
}
