package integration

import (
	"bytes"
	"context"
	"os/exec"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// TestKcatInterop checks the broker and our client against a client nobody
// here wrote: kcat (librdkafka) produces what Go reads, and reads back only
// the committed part of what Go produced transactionally.
func TestKcatInterop(t *testing.T) {
	brokers := realKafka(t).Brokers()
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		t.Fatalf("kcat not installed (make deps installs it): %v", err)
	}
	adm := newAdmin(t, brokers)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// kcat -> Go
	in := uniqueName(t, "from-kcat")
	createTopic(t, adm, in, 1, nil)
	cmd := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-P", "-t", in, "-K", ":")
	cmd.Stdin = strings.NewReader("k1:hello\nk2:from\nk3:kcat\n")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("kcat produce: %v\n%s", err, out)
	}
	got := consumeAll(t, brokers, in, kgo.ReadCommitted(), 3, 15*time.Second)
	if want := []string{"hello", "from", "kcat"}; !slices.Equal(got, want) {
		t.Fatalf("Go read %v from kcat, want %v", got, want)
	}

	// Go (transactional) -> kcat (read_committed by default)
	out := uniqueName(t, "to-kcat")
	createTopic(t, adm, out, 1, nil)
	produceTxn(t, brokers, out+"-tx", out, true, "one", "two")
	produceTxn(t, brokers, out+"-tx", out, false, "aborted")
	produceTxn(t, brokers, out+"-tx", out, true, "three")
	read := exec.CommandContext(ctx, kcat, "-b", strings.Join(brokers, ","), "-C", "-t", out,
		"-o", "beginning", "-e", "-q", "-f", "%k=%s\n")
	var stdout, stderr bytes.Buffer
	read.Stdout, read.Stderr = &stdout, &stderr
	if err := read.Run(); err != nil {
		t.Fatalf("kcat consume: %v\n%s", err, stderr.String())
	}
	lines := strings.Fields(stdout.String())
	if want := []string{"k=one", "k=two", "k=three"}; !slices.Equal(lines, want) {
		t.Fatalf("kcat read %v, want %v (read_committed must hide the aborted record)", lines, want)
	}
	t.Logf("kcat interop ok: kcat->go %v, go->kcat %v", got, lines)
}
