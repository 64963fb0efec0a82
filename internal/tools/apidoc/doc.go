// Command apidoc writes docs/API.md, the list of the exported API of every
// public package of the module, so that a change to the public API shows
// up as a diff of one reviewable file.
//
// Run it from the module root:
//
//	go run ./internal/tools/apidoc          # rewrite docs/API.md
//	go run ./internal/tools/apidoc -check   # exit 1 if docs/API.md is stale
//	go run ./internal/tools/apidoc -count   # "package<TAB>count" lines and a total
//
// A package is public unless its directory path has an "internal" element,
// lies under the top-level examples/, integration/ or cmd/ directories, or
// it is a package main. _test.go files are ignored, and files are selected
// with the build constraints of linux/amd64 with cgo, so the output does not
// depend on the machine that runs the tool.
//
// Each exported identifier is one line, as `go doc -short` shows it:
// functions and methods with their full signature (type parameters
// included), constants and variables with their type when it is declared
// or obvious from the value, types with their definition (struct and
// interface bodies are not repeated: each exported field, embedded field
// and interface method gets its own indented "  Type.Name" line, in
// declaration order). Constants, variables, functions and types are each
// sorted by name, so moving a declaration between files changes nothing;
// methods follow their type, sorted by name. Methods promoted from embedded
// fields are not listed.
//
// The source is read with go/parser and rendered with go/printer rather
// than go/doc: go/doc rewrites the declarations it filters (it drops names
// from value specs without their values, and promotes methods of embedded
// types), and this tool needs exact control over what counts as one
// identifier.
package main
