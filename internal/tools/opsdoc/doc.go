// Package opsdoc holds the test that keeps docs/OPERATIONS.md honest: every
// exported error sentinel (a package-level "var ErrX = errors.New(...)")
// and every exported type whose name ends in "Error", in every public
// package of the module, must be mentioned there in backticks as
// `pkg.Name` (the root package is written `kstate.Name`), and every such
// mention must name an error that exists.
//
// A package is public unless its directory path has an "internal" element,
// lies under the top-level examples/, integration/ or cmd/ directories, or
// it is a package main (the rule of internal/tools/apidoc). The package has
// no code of its own: run the check with
//
//	go test ./internal/tools/opsdoc/
package opsdoc
