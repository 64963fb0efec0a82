// Package netproxy is a TCP proxy for fault injection in tests: one
// listener forwarding every accepted connection to one target, whose
// traffic a test can pass, delay, drop or blackhole at any moment. The
// Kafka test cluster (internal/kafkabroker) puts one in front of each
// broker's client listener and advertises the proxy, so that every client
// connection after the bootstrap goes through it while the brokers'
// own traffic (replication, controller) does not.
package netproxy

import (
	"fmt"
	"net"
	"sync"
	"time"
)

// Mode is what a proxy does with its traffic.
type Mode int

const (
	// Pass forwards every byte at once.
	Pass Mode = iota
	// Delay forwards every byte after the proxy's delay (added latency,
	// in each direction; throughput is not limited).
	Delay
	// Drop closes every open connection, and every new one right after
	// it is accepted: the client sees its connections reset.
	Drop
	// Blackhole accepts connections but forwards nothing, in either
	// direction, until the mode changes: a network partition without any
	// error. What was read meanwhile is held (up to a bounded buffer, then
	// the proxy stops reading: TCP's own backpressure) and forwarded when
	// the mode changes to Pass or Delay, as TCP retransmits after a
	// partition heals.
	Blackhole
)

func (m Mode) String() string {
	switch m {
	case Pass:
		return "pass"
	case Delay:
		return "delay"
	case Drop:
		return "drop"
	case Blackhole:
		return "blackhole"
	}
	return fmt.Sprintf("Mode(%d)", int(m))
}

// Proxy forwards the connections accepted on its address to its target.
type Proxy struct {
	addr   string
	target string

	mu     sync.Mutex
	mode   Mode
	delay  time.Duration
	change chan struct{} // closed (and replaced) at every mode change
	ln     net.Listener  // nil once closed
	conns  map[*pair]struct{}
	stats  Stats
}

// Stats count what a proxy did since it started.
type Stats struct {
	Accepted int64 // connections accepted
	Dropped  int64 // connections closed by Drop (open ones and new ones)
	Bytes    int64 // bytes forwarded, both directions
}

// pair is one proxied connection: the client's and the target's side.
type pair struct{ client, upstream net.Conn }

func (p *pair) close() {
	p.client.Close()
	if p.upstream != nil {
		p.upstream.Close()
	}
}

// New listens on addr (host:port; port 0 picks a free one) and forwards
// every connection to target, in mode Pass.
func New(addr, target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("netproxy: listen on %s for %s: %w", addr, target, err)
	}
	p := &Proxy{addr: ln.Addr().String(), target: target, ln: ln, change: make(chan struct{}), conns: map[*pair]struct{}{}}
	go p.serve(ln)
	return p, nil
}

// Addr is the address the proxy listens on.
func (p *Proxy) Addr() string { return p.addr }

// Target is the address the proxy forwards to.
func (p *Proxy) Target() string { return p.target }

// Mode returns the current mode and, for Delay, the delay.
func (p *Proxy) Mode() (Mode, time.Duration) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay
}

// Stats returns the proxy's counters.
func (p *Proxy) Stats() Stats {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.stats
}

// Pass forwards everything at once from now on (held bytes of a
// blackhole first).
func (p *Proxy) Pass() { p.set(Pass, 0) }

// Delay adds d of latency to every byte forwarded from now on, in each
// direction.
func (p *Proxy) Delay(d time.Duration) { p.set(Delay, d) }

// Drop closes every connection now and every new one until the mode
// changes.
func (p *Proxy) Drop() { p.set(Drop, 0) }

// Blackhole stops forwarding, in both directions and on every connection,
// without closing any, until the mode changes.
func (p *Proxy) Blackhole() { p.set(Blackhole, 0) }

func (p *Proxy) set(m Mode, d time.Duration) {
	p.mu.Lock()
	p.mode, p.delay = m, d
	close(p.change)
	p.change = make(chan struct{})
	var drop []*pair
	if m == Drop {
		for c := range p.conns {
			drop = append(drop, c)
		}
		clear(p.conns)
		p.stats.Dropped += int64(len(drop))
	}
	p.mu.Unlock()
	for _, c := range drop {
		c.close()
	}
}

// Down closes the listener and every connection: clients meet
// "connection refused", as when the target's process is gone (the
// cluster harness takes a node's proxy down with the node: a proxy that
// accepted and closed at once would look like a broker that answers and
// then hangs up, which clients may take for a fatal mismatch). Up
// listens again.
func (p *Proxy) Down() { p.Close() }

// Up listens again on the proxy's address after Down, in the mode it had.
func (p *Proxy) Up() error {
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("netproxy: listen again on %s: %w", p.addr, err)
	}
	p.mu.Lock()
	if p.ln != nil {
		p.mu.Unlock()
		ln.Close()
		return fmt.Errorf("netproxy: Up on %s: the proxy is up", p.addr)
	}
	p.ln = ln
	p.mu.Unlock()
	go p.serve(ln)
	return nil
}

// Close stops listening and closes every connection (Up listens again).
func (p *Proxy) Close() {
	p.mu.Lock()
	ln := p.ln
	p.ln = nil
	conns := p.conns
	p.conns = map[*pair]struct{}{}
	close(p.change) // wakes the blackholed connections: they are gone
	p.change = make(chan struct{})
	p.mu.Unlock()
	if ln != nil {
		ln.Close()
	}
	for c := range conns {
		c.close()
	}
}

func (p *Proxy) serve(ln net.Listener) {
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		go p.handle(c)
	}
}

// track registers c unless the proxy is closed or dropping.
func (p *Proxy) track(c *pair) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.stats.Accepted++
	if p.ln == nil {
		return false
	}
	if p.mode == Drop {
		p.stats.Dropped++
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *Proxy) untrack(c *pair) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
	c.close()
}

// state returns the mode, the delay and the channel closed at the next
// change.
func (p *Proxy) state() (Mode, time.Duration, <-chan struct{}) {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.mode, p.delay, p.change
}

func (p *Proxy) handle(client net.Conn) {
	c := &pair{client: client}
	if !p.track(c) {
		client.Close()
		return
	}
	// A blackholed connection is not even dialled until the mode
	// changes: the client's connection is open, nothing answers.
	if !p.waitForward(c, nil) {
		p.untrack(c)
		return
	}
	up, err := net.DialTimeout("tcp", p.target, 10*time.Second)
	if err != nil {
		// The target refused: reset the client's connection (RST, not
		// FIN), the nearest a proxy that already accepted can come to
		// "connection refused". A plain close reads as a server that
		// answered and hung up at once, which a Kafka client takes for a
		// TLS/SASL mismatch rather than a broker that is down.
		if tc, ok := client.(*net.TCPConn); ok {
			_ = tc.SetLinger(0)
		}
		p.untrack(c)
		return
	}
	p.mu.Lock()
	c.upstream = up
	_, open := p.conns[c]
	p.mu.Unlock()
	if !open { // dropped or closed while dialling
		c.close()
		return
	}
	var wg sync.WaitGroup
	wg.Go(func() { p.pump(c, client, up) })
	wg.Go(func() { p.pump(c, up, client) })
	wg.Wait()
	p.untrack(c)
}

// chunk is bytes read at a time.
type chunk struct {
	b  []byte
	at time.Time
}

// pump copies src to dst through a bounded queue: the reader stamps each
// chunk with the time it was read, the writer forwards it once the mode
// allows (Delay: at + delay). Either side's end closes both connections.
func (p *Proxy) pump(c *pair, src, dst net.Conn) {
	q := make(chan chunk, 64)
	go func() {
		defer close(q)
		for {
			b := make([]byte, 32<<10)
			n, err := src.Read(b)
			if n > 0 {
				q <- chunk{b[:n], time.Now()}
			}
			if err != nil {
				return
			}
		}
	}()
	defer func() {
		c.close()
		for range q { // let the reader end
		}
	}()
	for ch := range q {
		if !p.waitForward(c, &ch) {
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
		p.mu.Lock()
		p.stats.Bytes += int64(len(ch.b))
		p.mu.Unlock()
	}
}

// waitForward waits until ch (nil: a new connection) may be forwarded:
// at once in Pass, at ch.at + delay in Delay, never while blackholed.
// False if the connection is gone (dropped or the proxy closed).
func (p *Proxy) waitForward(c *pair, ch *chunk) bool {
	for {
		p.mu.Lock()
		_, open := p.conns[c]
		p.mu.Unlock()
		if !open {
			return false
		}
		mode, d, change := p.state()
		switch mode {
		case Pass:
			return true
		case Delay:
			if ch == nil {
				return true
			}
			wait := time.Until(ch.at.Add(d))
			if wait <= 0 {
				return true
			}
			t := time.NewTimer(wait)
			select {
			case <-t.C:
				return true
			case <-change: // the delay changed: wait by the new mode
				t.Stop()
			}
		case Drop:
			return false
		case Blackhole:
			<-change
		}
	}
}
