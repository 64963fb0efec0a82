// Package faultdial is a kgo.Dialer for tests that cuts the connection
// carrying a committing EndTxn, before the request or after the broker's
// answer, and makes franz-go's retries of it fail for a while: the commit
// comes back unconfirmed (issue #28, RELIABILITY.md Finding 3); with Abort,
// an aborting EndTxn instead. The kfake
// tests of package kstate and the real-broker tests in integration/ use it.
package faultdial

import (
	"context"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// Mode is where the cut falls.
type Mode int

const (
	// LostRequest: the committing EndTxn is never sent; dials to its
	// broker are then refused for Cutter.Refuse (a broker in controlled
	// shutdown: RELIABILITY.md Finding 3).
	LostRequest Mode = iota
	// LostAnswer: the EndTxn is sent and the broker ends the
	// transaction, its answer is dropped; the request's retries (same
	// producer id and epoch) are then cut before they are sent for
	// Cutter.Refuse. Dials are not refused: the group coordinator often
	// shares the broker, and a rejoin would read the committed offsets
	// and hide a wrong redo.
	LostAnswer
)

// Cutter is a kgo.Dialer that cuts the connection of the next
// committing (or, with Abort, aborting) EndTxn once armed.
type Cutter struct {
	Mode   Mode
	Refuse time.Duration // how long the retries fail after the cut
	// Abort: the armed cut takes the next aborting EndTxn instead (a
	// rebalance turned the commit into an abort, or the caller aborted).
	Abort bool

	armed atomic.Bool
	cuts  atomic.Int32

	mu        sync.Mutex
	refusing  map[string]time.Time // address -> dials refused until (LostRequest)
	cutUntil  time.Time            // EndTxn requests cut until (LostAnswer)...
	cutTxn    [2]int64             // ...of this producer id and epoch: the cut request's retries
	refusedAt int                  // retries failed: dials refused, EndTxn requests cut
}

// Dial is the kgo.Dialer.
func (d *Cutter) Dial(ctx context.Context, network, host string) (net.Conn, error) {
	d.mu.Lock()
	until, refused := d.refusing[host]
	if refused && time.Now().Before(until) {
		d.refusedAt++
		d.mu.Unlock()
		return nil, &net.OpError{Op: "dial", Net: network, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	}
	d.mu.Unlock()
	var nd net.Dialer
	c, err := nd.DialContext(ctx, network, host)
	if err != nil {
		return nil, err
	}
	return &cutConn{Conn: c, d: d, host: host, endCorr: -1}, nil
}

func (d *Cutter) startRefusing(host string, req *kmsg.EndTxnRequest) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.Mode == LostAnswer {
		d.cutUntil = time.Now().Add(d.Refuse)
		d.cutTxn = [2]int64{req.ProducerID, int64(req.ProducerEpoch)}
		return
	}
	if d.refusing == nil {
		d.refusing = make(map[string]time.Time)
	}
	d.refusing[host] = time.Now().Add(d.Refuse)
}

// cutRetry reports whether b is a retry of the EndTxn of a LostAnswer cut,
// within the window, to be cut before it is sent. The batch's redo (a new
// epoch, once the session found the outcome) is let through.
func (d *Cutter) cutRetry(b []byte) bool {
	req := endTxn(b)
	if req == nil {
		return false
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Now().Before(d.cutUntil) && d.cutTxn == [2]int64{req.ProducerID, int64(req.ProducerEpoch)} {
		d.refusedAt++
		return true
	}
	return false
}

// Failed is how many retries failed: dials refused, EndTxn requests cut.
func (d *Cutter) Failed() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.refusedAt
}

// cutConn is one connection of the dialer. franz-go writes each request in
// one Write: size, api key, version, correlation id.
type cutConn struct {
	net.Conn
	d       *Cutter
	host    string
	endCorr int32 // correlation id of the EndTxn whose answer is to be lost; -1 none
	rmu     sync.Mutex
}

var errCut = &net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ECONNRESET)}

func (c *cutConn) Write(b []byte) (int, error) {
	if c.d.cutRetry(b) {
		c.Conn.Close()
		return 0, errCut
	}
	if req := endTxn(b); req != nil && req.Commit != c.d.Abort && c.d.armed.CompareAndSwap(true, false) {
		c.d.cuts.Add(1)
		c.d.startRefusing(c.host, req)
		if c.d.Mode == LostRequest {
			c.Conn.Close()
			return 0, errCut
		}
		c.rmu.Lock()
		c.endCorr = int32(binary.BigEndian.Uint32(b[8:12]))
		c.rmu.Unlock()
	}
	return c.Conn.Write(b)
}

// endTxn decodes b if it is a whole EndTxn request; nil otherwise.
func endTxn(b []byte) *kmsg.EndTxnRequest {
	if len(b) < 14 || int16(binary.BigEndian.Uint16(b[4:6])) != int16(kmsg.EndTxn) {
		return nil
	}
	req := kmsg.NewPtrEndTxnRequest()
	req.Version = int16(binary.BigEndian.Uint16(b[6:8]))
	body := 12 + 2 + int(int16(binary.BigEndian.Uint16(b[12:14]))) // the client id, a nullable string
	if req.IsFlexible() {
		body++ // the header's empty tagged fields
	}
	if body > len(b) || req.ReadFrom(b[body:]) != nil {
		return nil
	}
	return req
}

// Read, once an EndTxn's answer is to be lost, reads the responses until
// that one (the broker has ended the transaction), drops them and cuts the
// connection.
func (c *cutConn) Read(b []byte) (int, error) {
	c.rmu.Lock()
	corr := c.endCorr
	c.rmu.Unlock()
	if corr < 0 {
		return c.Conn.Read(b)
	}
	for {
		var hdr [8]byte
		if _, err := io.ReadFull(c.Conn, hdr[:]); err != nil {
			return 0, err
		}
		size := int(binary.BigEndian.Uint32(hdr[:4]))
		if _, err := io.CopyN(io.Discard, c.Conn, int64(size-4)); err != nil {
			return 0, err
		}
		if int32(binary.BigEndian.Uint32(hdr[4:8])) == corr {
			break
		}
	}
	c.Conn.Close()
	return 0, &net.OpError{Op: "read", Net: "tcp", Err: os.NewSyscallError("read", syscall.ECONNRESET)}
}

// Arm makes the next committing EndTxn (aborting, with Abort) the one cut.
func (d *Cutter) Arm() { d.armed.Store(true) }

// Cuts is how many EndTxn requests were cut as armed (0 or 1 per Arm).
func (d *Cutter) Cuts() int { return int(d.cuts.Load()) }

// CutDuring arms d and calls step (which keeps input coming and waits a
// little) until an EndTxn was cut or timeout passed, then after more times.
// It returns step's first error, or one saying nothing was cut.
func (d *Cutter) CutDuring(timeout time.Duration, after int, step func() error) error {
	d.Arm()
	deadline := time.Now().Add(timeout)
	for d.Cuts() == 0 && time.Now().Before(deadline) {
		if err := step(); err != nil {
			return err
		}
	}
	if d.Cuts() == 0 {
		return errors.New("faultdial: no EndTxn was cut within the timeout: the case tests nothing")
	}
	for range after {
		if err := step(); err != nil {
			return err
		}
	}
	return nil
}
