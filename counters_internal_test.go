package kstate

import (
	"reflect"
	"testing"
	"time"

	"github.com/kstate/kstate/internal/engine"
)

// newCounters maps every public counter from the engine counter of the
// same name (a forgotten field would read 0 forever), and kstatetest's
// conversion is the same function.
func TestCountersFromEngine(t *testing.T) {
	var ec engine.Counters
	ev := reflect.ValueOf(&ec).Elem()
	for i := range ev.NumField() {
		f := ev.Field(i)
		switch f.Kind() {
		case reflect.Int64:
			if f.Type() == reflect.TypeFor[time.Duration]() {
				f.SetInt(int64(time.Duration(i+1) * time.Millisecond))
			} else {
				f.SetInt(int64(1000 + i))
			}
		default:
			t.Fatalf("engine.Counters.%s has kind %s: extend this test", ev.Type().Field(i).Name, f.Kind())
		}
	}
	for name, c := range map[string]Counters{"newCounters": newCounters(ec)} {
		pv := reflect.ValueOf(c)
		for i := range pv.NumField() {
			fn := pv.Type().Field(i).Name
			src := ev.FieldByName(fn)
			if !src.IsValid() {
				t.Fatalf("Counters.%s has no engine counter", fn)
			}
			if got, want := pv.Field(i).Int(), src.Int(); got != want || got == 0 {
				t.Errorf("%s: Counters.%s = %d, want the engine's %d", name, fn, got, want)
			}
		}
	}
}
