// Package testprocs holds the SPEC's example processors, shared by the
// kfake tests of package kstate, the real-broker tests in integration/ and
// the child-process test application (integration/testapp). Every processor
// has string keys, string input rows and string outputs, so that expected
// outputs can be written down exactly.
package testprocs
