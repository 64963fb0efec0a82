package netproxy

import (
	"bufio"
	"errors"
	"io"
	"net"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"
)

// echoServer answers every line with the same line.
func echoServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	return ln.Addr().String()
}

func newProxy(t *testing.T) *Proxy {
	t.Helper()
	p, err := New("127.0.0.1:0", echoServer(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(p.Close)
	return p
}

type conn struct {
	net.Conn
	r *bufio.Reader
}

func dial(t *testing.T, p *Proxy) *conn {
	t.Helper()
	c, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &conn{c, bufio.NewReader(c)}
}

// roundTrip sends line and reads the echo within limit.
func (c *conn) roundTrip(line string, limit time.Duration) (string, error) {
	c.SetDeadline(time.Now().Add(limit))
	defer c.SetDeadline(time.Time{})
	if _, err := c.Write([]byte(line + "\n")); err != nil {
		return "", err
	}
	s, err := c.r.ReadString('\n')
	return strings.TrimSuffix(s, "\n"), err
}

func (c *conn) mustEcho(t *testing.T, line string) time.Duration {
	t.Helper()
	start := time.Now()
	got, err := c.roundTrip(line, 10*time.Second)
	if err != nil || got != line {
		t.Fatalf("round trip of %q: got %q, %v", line, got, err)
	}
	return time.Since(start)
}

func TestPass(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "hello")
	// A large write crosses several reads and queue slots, in order.
	big := strings.Repeat("0123456789", 100_000)
	c.mustEcho(t, big)
	if st := p.Stats(); st.Accepted != 1 || st.Bytes < 2*int64(len(big)) {
		t.Fatalf("stats %+v: want 1 accepted and at least %d bytes", st, 2*len(big))
	}
}

func TestDelay(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "warm")
	const d = 150 * time.Millisecond
	p.Delay(d)
	if m, got := p.Mode(); m != Delay || got != d {
		t.Fatalf("mode %v %v, want delay %v", m, got, d)
	}
	// The request and the answer are each delayed.
	if rt := c.mustEcho(t, "slow"); rt < 2*d {
		t.Fatalf("round trip %v with a delay of %v each way, want at least %v", rt, d, 2*d)
	}
	// A new connection is delayed too.
	c2 := dial(t, p)
	if rt := c2.mustEcho(t, "slow2"); rt < 2*d {
		t.Fatalf("round trip %v on a new connection, want at least %v", rt, 2*d)
	}
	p.Pass()
	c.mustEcho(t, "fast") // no upper bound: the machine is shared
}

func TestDrop(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "before")
	p.Drop()
	// The open connection is closed.
	if _, err := c.roundTrip("during", 10*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("open connection after Drop: %v, want it closed", err)
	}
	// New connections are accepted and closed at once.
	c2 := dial(t, p)
	if _, err := c2.roundTrip("new", 10*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("new connection while dropping: %v, want it closed", err)
	}
	p.Pass()
	dial(t, p).mustEcho(t, "after")
	if st := p.Stats(); st.Dropped != 2 || st.Accepted != 3 {
		t.Fatalf("stats %+v, want 3 accepted, 2 dropped", st)
	}
}

func TestBlackhole(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "before")
	p.Blackhole()
	// Nothing comes back, and nothing is closed.
	if _, err := c.roundTrip("held", 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("round trip while blackholed: %v, want a timeout", err)
	}
	// A new connection is accepted, and nothing answers either.
	c2 := dial(t, p)
	if _, err := c2.roundTrip("held2", 500*time.Millisecond); !isTimeout(err) {
		t.Fatalf("new connection while blackholed: %v, want a timeout", err)
	}
	// Healed: what was held is forwarded, in order, and then the rest.
	p.Pass()
	for _, cc := range []struct {
		c    *conn
		want string
	}{{c, "held"}, {c2, "held2"}} {
		cc.c.SetDeadline(time.Now().Add(10 * time.Second))
		got, err := cc.c.r.ReadString('\n')
		if err != nil || got != cc.want+"\n" {
			t.Fatalf("after the blackhole: %q, %v, want %q", got, err, cc.want)
		}
		cc.c.mustEcho(t, "after")
	}
}

// Close ends every connection, blackholed ones too, and the listener.
func TestClose(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "x")
	p.Blackhole()
	c2 := dial(t, p)
	time.Sleep(50 * time.Millisecond)
	p.Close()
	for _, cc := range []*conn{c, c2} {
		if _, err := cc.roundTrip("y", 10*time.Second); err == nil || isTimeout(err) {
			t.Fatalf("connection after Close: %v, want it closed", err)
		}
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("dial after Close succeeded")
	}
}

// A target that is down: the client's connection is closed (as a broker
// that was killed behind its proxy).
func TestTargetDown(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	target := ln.Addr().String()
	ln.Close()
	p, err := New("127.0.0.1:0", target)
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	// The reset may reach the client before its dial returns.
	nc, err := net.DialTimeout("tcp", p.Addr(), 5*time.Second)
	if err == nil {
		defer nc.Close()
		c := &conn{nc, bufio.NewReader(nc)}
		_, err = c.roundTrip("x", 10*time.Second)
	}
	if !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("connection to a dead target: %v, want it reset", err)
	}
}

func isTimeout(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }

// Down refuses connections (as a dead target's host does) until Up.
func TestDownUp(t *testing.T) {
	p := newProxy(t)
	c := dial(t, p)
	c.mustEcho(t, "x")
	p.Down()
	if _, err := c.roundTrip("y", 10*time.Second); err == nil || isTimeout(err) {
		t.Fatalf("connection after Down: %v, want it closed", err)
	}
	if c, err := net.DialTimeout("tcp", p.Addr(), time.Second); err == nil {
		c.Close()
		t.Fatalf("dial after Down succeeded, want refused")
	}
	if err := p.Up(); err != nil {
		t.Fatal(err)
	}
	if err := p.Up(); err == nil {
		t.Fatalf("second Up: no error")
	}
	dial(t, p).mustEcho(t, "z")
}
