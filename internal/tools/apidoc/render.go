package main

import (
	"bytes"
	"go/ast"
	"go/printer"
	"go/token"
	"slices"
	"strings"
)

// entry is one top-level line to sort by name.
type entry struct {
	name string
	text string
}

// typeEntry is an exported type with its fields or interface methods.
type typeEntry struct {
	name    string
	header  string
	members []Line
}

// packageLines lists the exported API of one package's non-test files:
// constants, variables, functions and types, each sorted by name; a type is
// followed by its fields or interface methods (declaration order) and its
// methods (sorted by name).
func packageLines(files []*ast.File) []Line {
	var consts, vars, funcs []entry
	types := map[string]*typeEntry{}
	methods := map[string][]entry{} // by receiver base type name
	declared := map[string]bool{}   // every type name of the package
	for _, f := range files {
		for _, d := range f.Decls {
			if g, ok := d.(*ast.GenDecl); ok && g.Tok == token.TYPE {
				for _, s := range g.Specs {
					declared[s.(*ast.TypeSpec).Name.Name] = true
				}
			}
		}
	}
	for _, f := range files {
		for _, d := range f.Decls {
			switch d := d.(type) {
			case *ast.FuncDecl:
				if !d.Name.IsExported() {
					continue
				}
				text := funcSignature(d)
				if d.Recv == nil {
					funcs = append(funcs, entry{d.Name.Name, text})
					continue
				}
				if len(d.Recv.List) == 1 {
					if base := baseTypeName(d.Recv.List[0].Type); ast.IsExported(base) {
						methods[base] = append(methods[base], entry{d.Name.Name, text})
					}
				}
			case *ast.GenDecl:
				switch d.Tok {
				case token.CONST:
					consts = append(consts, valueEntries("const", d, declared)...)
				case token.VAR:
					vars = append(vars, valueEntries("var", d, declared)...)
				case token.TYPE:
					for _, s := range d.Specs {
						if t := typeDecl(s.(*ast.TypeSpec)); t != nil {
							types[t.name] = t
						}
					}
				}
			}
		}
	}

	var out []Line
	for _, list := range [][]entry{consts, vars, funcs} {
		sortEntries(list)
		for _, e := range list {
			out = append(out, Line{Text: e.text, Counted: true})
		}
	}
	names := make([]string, 0, len(types))
	for name := range types {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		t := types[name]
		out = append(out, Line{Text: t.header, Counted: true})
		out = append(out, t.members...)
		ms := methods[name]
		sortEntries(ms)
		for _, m := range ms {
			out = append(out, Line{Text: m.text, Counted: true})
		}
	}
	return out
}

func sortEntries(list []entry) {
	slices.SortStableFunc(list, func(a, b entry) int {
		if c := strings.Compare(a.name, b.name); c != 0 {
			return c
		}
		return strings.Compare(a.text, b.text)
	})
}

// funcSignature renders a function or method declaration without its body.
func funcSignature(d *ast.FuncDecl) string {
	c := *d
	c.Doc = nil
	c.Body = nil
	return render(&c)
}

// typeDecl renders an exported type declaration, or returns nil.
func typeDecl(s *ast.TypeSpec) *typeEntry {
	if !s.Name.IsExported() {
		return nil
	}
	t := &typeEntry{name: s.Name.Name}
	c := *s
	c.Doc, c.Comment = nil, nil
	switch typ := s.Type.(type) {
	case *ast.StructType:
		if !s.Assign.IsValid() {
			c.Type = ast.NewIdent("struct")
			t.members = structMembers(t.name, typ)
		}
	case *ast.InterfaceType:
		if !s.Assign.IsValid() {
			c.Type = ast.NewIdent("interface")
			t.members = interfaceMembers(t.name, typ)
		}
	}
	t.header = "type " + render(&c)
	return t
}

func structMembers(owner string, st *ast.StructType) []Line {
	var out []Line
	for _, f := range st.Fields.List {
		if len(f.Names) == 0 {
			if name := baseTypeName(f.Type); ast.IsExported(name) {
				out = append(out, Line{Text: "  " + owner + "." + name + " (embedded " + render(f.Type) + ")", Counted: true})
			}
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				out = append(out, Line{Text: "  " + owner + "." + n.Name + " " + render(f.Type), Counted: true})
			}
		}
	}
	return out
}

func interfaceMembers(owner string, it *ast.InterfaceType) []Line {
	var out []Line
	for _, f := range it.Methods.List {
		if len(f.Names) == 0 {
			switch f.Type.(type) {
			case *ast.Ident, *ast.SelectorExpr, *ast.IndexExpr, *ast.IndexListExpr:
				if name := baseTypeName(f.Type); ast.IsExported(name) {
					out = append(out, Line{Text: "  " + owner + "." + name + " (embedded " + render(f.Type) + ")", Counted: true})
				}
			default: // a type-set element of a constraint, such as ~int | ~string
				out = append(out, Line{Text: "  " + owner + " (type set) " + render(f.Type)})
			}
			continue
		}
		ft, ok := f.Type.(*ast.FuncType)
		if !ok {
			continue
		}
		for _, n := range f.Names {
			if n.IsExported() {
				sig := strings.TrimPrefix(render(ft), "func")
				out = append(out, Line{Text: "  " + owner + "." + n.Name + sig, Counted: true})
			}
		}
	}
	return out
}

// valueEntries lists the exported names of a const or var declaration. In
// a const group a spec without type and values repeats the previous one's
// (the iota rule), so it gets that type.
func valueEntries(kw string, d *ast.GenDecl, declared map[string]bool) []entry {
	var out []entry
	var prevType ast.Expr
	var prevValues []ast.Expr
	for _, s := range d.Specs {
		vs := s.(*ast.ValueSpec)
		typ, values := vs.Type, vs.Values
		if kw == "const" {
			if typ == nil && len(values) == 0 {
				typ, values = prevType, prevValues
			} else {
				prevType, prevValues = typ, values
			}
		}
		for i, n := range vs.Names {
			if !n.IsExported() {
				continue
			}
			text := kw + " " + n.Name
			if typ != nil {
				text += " " + render(typ)
			} else if len(values) == len(vs.Names) {
				if t := inferType(kw, values[i], declared); t != "" {
					text += " " + t
				}
			}
			out = append(out, entry{n.Name, text})
		}
	}
	return out
}

// predeclared are the predeclared type names usable in a conversion.
var predeclared = map[string]bool{
	"bool": true, "byte": true, "complex64": true, "complex128": true, "error": true,
	"float32": true, "float64": true, "int": true, "int8": true, "int16": true,
	"int32": true, "int64": true, "rune": true, "string": true, "uint": true,
	"uint8": true, "uint16": true, "uint32": true, "uint64": true, "uintptr": true,
	"any": true,
}

// inferType returns the type of an untyped declaration when the value makes
// it obvious, or "": errors.New and fmt.Errorf give error, T{...} gives T,
// &T{...} gives *T, a conversion to a predeclared or package-declared type
// gives that type, and (for var only) a basic literal gives its default type.
// An untyped constant is shown without a type.
func inferType(kw string, v ast.Expr, declared map[string]bool) string {
	switch v := ast.Unparen(v).(type) {
	case *ast.BasicLit:
		if kw == "const" {
			return ""
		}
		switch v.Kind {
		case token.INT:
			return "int"
		case token.FLOAT:
			return "float64"
		case token.IMAG:
			return "complex128"
		case token.CHAR:
			return "rune"
		case token.STRING:
			return "string"
		}
	case *ast.CompositeLit:
		if v.Type != nil {
			return render(v.Type)
		}
	case *ast.UnaryExpr:
		if cl, ok := v.X.(*ast.CompositeLit); ok && v.Op == token.AND && cl.Type != nil {
			return "*" + render(cl.Type)
		}
	case *ast.CallExpr:
		switch fun := v.Fun.(type) {
		case *ast.SelectorExpr:
			if x, ok := fun.X.(*ast.Ident); ok &&
				(x.Name == "errors" && fun.Sel.Name == "New" || x.Name == "fmt" && fun.Sel.Name == "Errorf") {
				return "error"
			}
		case *ast.Ident:
			if len(v.Args) == 1 && (predeclared[fun.Name] || declared[fun.Name]) {
				return fun.Name
			}
		}
	}
	return ""
}

// baseTypeName returns the name of a (possibly pointer, qualified or
// instantiated) named type: *pkg.T[A] gives T.
func baseTypeName(e ast.Expr) string {
	for {
		switch t := e.(type) {
		case *ast.StarExpr:
			e = t.X
		case *ast.ParenExpr:
			e = t.X
		case *ast.IndexExpr:
			e = t.X
		case *ast.IndexListExpr:
			e = t.X
		case *ast.SelectorExpr:
			return t.Sel.Name
		case *ast.Ident:
			return t.Name
		default:
			return ""
		}
	}
}

// render prints a node on one line. It prints with an empty FileSet, so
// the printer sees every position on the same line and keeps parameter
// lists together; what still spans lines (the body of a struct or
// interface type literal) is joined with "; ".
func render(n ast.Node) string {
	var b bytes.Buffer
	if err := printer.Fprint(&b, token.NewFileSet(), n); err != nil {
		panic(err) // printing a parsed AST into a buffer does not fail
	}
	s := b.String()
	if !strings.Contains(s, "\n") {
		return s
	}
	var out strings.Builder
	for i, l := range strings.Split(s, "\n") {
		l = strings.Join(strings.Fields(l), " ")
		if l == "" {
			continue
		}
		if i > 0 {
			prev := out.String()
			if strings.HasSuffix(prev, "{") || strings.HasPrefix(l, "}") {
				out.WriteString(" ")
			} else {
				out.WriteString("; ")
			}
		}
		out.WriteString(l)
	}
	s = strings.ReplaceAll(out.String(), "struct {", "struct{")
	return strings.ReplaceAll(s, "interface {", "interface{")
}
