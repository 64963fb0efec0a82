// Package optpath sets one field of a nested options struct from
// "Path=value", the path naming the field through its nested structs with
// dots (Batching.MaxWait, Group.Standbys): the -set flags of kstate's
// benchmark programs (cmd/kstate-count, kstate bench scale), so that a
// kstate.Options field added later is set without a change there. Only
// fields of basic kinds and time.Duration can be set.
package optpath

import (
	"fmt"
	"reflect"
	"strconv"
	"strings"
	"time"
)

// Set sets the field of *opts (a pointer to a struct) that assignment,
// "Path=value", names. Its errors quote the assignment; the caller names
// its flag.
func Set(opts any, assignment string) error {
	name, value, ok := strings.Cut(assignment, "=")
	if !ok {
		return fmt.Errorf("%q: want Path=value", assignment)
	}
	f := reflect.ValueOf(opts).Elem()
	for part := range strings.SplitSeq(name, ".") {
		if f.Kind() != reflect.Struct {
			f = reflect.Value{}
			break
		}
		if f = f.FieldByName(part); !f.IsValid() {
			break
		}
	}
	if !f.IsValid() || !f.CanSet() || f.Kind() == reflect.Struct {
		return fmt.Errorf("%q: %s has no settable field %s (name it by its path, e.g. Batching.MaxWait)", assignment, reflect.TypeOf(opts).Elem(), name)
	}
	var err error
	switch {
	case f.Type() == reflect.TypeFor[time.Duration]():
		var d time.Duration
		if d, err = time.ParseDuration(value); err == nil {
			f.SetInt(int64(d))
		}
	case f.Kind() == reflect.String:
		f.SetString(value)
	case f.Kind() == reflect.Bool:
		var b bool
		if b, err = strconv.ParseBool(value); err == nil {
			f.SetBool(b)
		}
	case f.CanInt():
		var n int64
		if n, err = strconv.ParseInt(value, 0, f.Type().Bits()); err == nil {
			f.SetInt(n)
		}
	case f.CanUint():
		var n uint64
		if n, err = strconv.ParseUint(value, 0, f.Type().Bits()); err == nil {
			f.SetUint(n)
		}
	case f.CanFloat():
		var x float64
		if x, err = strconv.ParseFloat(value, f.Type().Bits()); err == nil {
			f.SetFloat(x)
		}
	default:
		err = fmt.Errorf("field %s has type %s, which cannot be set", name, f.Type())
	}
	if err != nil {
		return fmt.Errorf("%q: %w", assignment, err)
	}
	return nil
}
