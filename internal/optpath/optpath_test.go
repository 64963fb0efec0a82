package optpath

import (
	"strings"
	"testing"
	"time"
)

type inner struct {
	N    int
	U    uint16
	D    time.Duration
	S    string
	B    bool
	F    float64
	Strs []string
}

type outer struct {
	Name  string
	Inner inner
	priv  int // unexported: Set refuses it
}

func TestSet(t *testing.T) {
	var o outer
	_ = o.priv
	for _, a := range []string{"Name=x", "Inner.N=0x10", "Inner.U=7", "Inner.D=50ms", "Inner.S=a=b", "Inner.B=true", "Inner.F=0.5"} {
		if err := Set(&o, a); err != nil {
			t.Fatalf("Set(%q): %v", a, err)
		}
	}
	want := outer{Name: "x", Inner: inner{N: 16, U: 7, D: 50 * time.Millisecond, S: "a=b", B: true, F: 0.5}}
	if o.Name != want.Name || o.Inner.N != want.Inner.N || o.Inner.U != want.Inner.U || o.Inner.D != want.Inner.D ||
		o.Inner.S != want.Inner.S || !o.Inner.B || o.Inner.F != want.Inner.F {
		t.Fatalf("got %+v, want %+v", o, want)
	}
	for bad, says := range map[string]string{
		"Inner.N":        "want Path=value",
		"Nope=1":         "no settable field Nope",
		"Inner=1":        "no settable field Inner",
		"priv=1":         "no settable field priv",
		"Name.X=1":       "no settable field Name.X",
		"Inner.N=x":      "invalid syntax",
		"Inner.U=70000":  "out of range",
		"Inner.D=5":      "missing unit",
		"Inner.Strs=a,b": "cannot be set",
	} {
		err := Set(&o, bad)
		if err == nil || !strings.Contains(err.Error(), says) || !strings.Contains(err.Error(), bad) {
			t.Errorf("Set(%q) = %v, want an error quoting it and saying %q", bad, err, says)
		}
	}
}
