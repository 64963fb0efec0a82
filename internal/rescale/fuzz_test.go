package rescale

import (
	"testing"

	"github.com/kstate/kstate/changelog"
	"github.com/kstate/kstate/internal/changelogfmt"
)

// FuzzBuild: Build reads changelog bytes (keys and values of another
// application's changelog); on any of them it returns a plan or an error,
// never panics, and a plan routes every entry it keeps.
func FuzzBuild(f *testing.F) {
	f.Add(string(changelogfmt.StateKey(1, []byte("a"), nil)), []byte("x"), string(changelogfmt.MetaKey("var/c")), []byte(regCount))
	f.Add(string(changelogfmt.TTLKey(5, changelogfmt.StateKey(2, []byte("b"), []byte{1}))), []byte{}, string(changelogfmt.MetaKey("varid/next")), []byte{0, 0, 0, 9})
	f.Add(string(changelogfmt.TimerByKey([]byte("k"), 3)), []byte{}, string(changelogfmt.MetaKey("engine/watermark")), []byte{1, 2})
	f.Fuzz(func(t *testing.T, k0 string, v0 []byte, k1 string, v1 []byte) {
		src := twoPartitions()
		src[0][k0] = v0
		src[1][k1] = v1
		plan, err := Build(src, 3, []int64{0, 0, 0})
		if err != nil {
			return
		}
		for _, pp := range plan.Partitions {
			for _, e := range pp.Records {
				if _, err := changelog.DecodeKey(e.Key); err != nil {
					t.Fatalf("plan holds an undecodable key %x: %v", e.Key, err)
				}
			}
		}
	})
}
