package kafka

import (
	"testing"

	"github.com/kstate/kstate/kafka/embedded"
	"github.com/twmb/franz-go/pkg/kgo"
)

// TestSessionFetchMaxBytes: a session's consumer bounds a fetch response to
// sessionFetchMaxBytes, not franz-go's 50 MiB, which with 1 MiB per
// partition let the buffered fetch grow with the partitions (issue #29,
// many partitions); Client.Extra still overrides it.
func TestSessionFetchMaxBytes(t *testing.T) {
	e, err := embedded.Start(embedded.Options{Topics: map[string]int{"in": 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	for _, tc := range []struct {
		name  string
		extra []kgo.Opt
		want  int32
	}{
		{"default", nil, sessionFetchMaxBytes},
		{"Extra overrides", []kgo.Opt{kgo.FetchMaxBytes(64 << 20)}, 64 << 20},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s, err := NewSession(SessionConfig{Brokers: e.Brokers(), Client: ClientConfig{Extra: tc.extra}, GroupID: "g-" + tc.name, Topics: []string{"in"}})
			if err != nil {
				t.Fatal(err)
			}
			defer s.Close()
			if got := s.client.Load().OptValue(kgo.FetchMaxBytes).(int32); got != tc.want {
				t.Fatalf("FetchMaxBytes %d, want %d", got, tc.want)
			}
		})
	}
}
