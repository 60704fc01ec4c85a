package kafkaio

import (
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// reauthTimeout bounds one re-authentication on a connection, and how long a request due to
// re-authenticate first waits for the requests in flight to be answered.
const reauthTimeout = 5 * time.Second

// errReauthPending is what a write gets when its session must re-authenticate first and the
// connection's requests were not answered in time: the request is not written (a broker closes a
// connection that sends one past the session's lifetime), and the caller's retry dials again.
var errReauthPending = errors.New("kafkaio: the SASL session must re-authenticate before the next request, and the requests in flight were not answered")

// reauthentications counts the re-authentications of every connection of the process (SASL,
// KIP-368), so that tests can tell the client re-authenticated (export_test.go).
var reauthentications atomic.Int64

// dial opens a connection to address for kafka-go's Transport and Dialer: TCP, then TLS when c
// has it, then SASL when c has it. A SASL connection re-authenticates before each request once
// 80-90% of the session lifetime the broker granted has passed (see reauthConn), so a broker that
// enforces connections.max.reauth.ms never closes it. The dial and the first exchange are bounded
// by ctx; the caller gets a kafka.Error for a refused authentication.
func (c Conn) dial(ctx context.Context, network, address string) (net.Conn, error) {
	nc, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	if nc, err = c.secure(ctx, nc, address); err != nil || c.SASL == nil {
		return nc, err
	}
	rc, err := c.authenticate(ctx, nc, address)
	if err != nil {
		nc.Close()
		return nil, err
	}
	return rc, nil
}

// secure returns nc wrapped in TLS when c has TLS, after the handshake (the server name is the
// host of address unless the config names one), and nc itself otherwise. It closes nc on failure.
func (c Conn) secure(ctx context.Context, nc net.Conn, address string) (net.Conn, error) {
	if c.TLS == nil {
		return nc, nil
	}
	cfg := c.TLS
	if cfg.ServerName == "" {
		host, _, _ := net.SplitHostPort(address)
		cfg = cfg.Clone()
		cfg.ServerName = host
	}
	tc := tls.Client(nc, cfg)
	if err := tc.HandshakeContext(ctx); err != nil {
		nc.Close()
		return nil, err
	}
	return tc, nil
}

// authenticate runs the first SASL exchange on nc within ctx and returns nc as a reauthConn.
func (c Conn) authenticate(ctx context.Context, nc net.Conn, address string) (*reauthConn, error) {
	a, err := newAuthenticator(c.SASL, c.clientID(), address)
	if err != nil {
		return nil, err
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(reauthTimeout)
	}
	_ = nc.SetDeadline(deadline)
	start := time.Now()
	lifetime, err := a.authenticate(ctx, nc)
	if err != nil {
		return nil, err
	}
	_ = nc.SetDeadline(time.Time{})
	rc := &reauthConn{Conn: nc, auth: a}
	rc.due, rc.early = reauthDue(start, lifetime)
	return rc, nil
}

// minReauthInterval is how soon after an exchange a broker accepts the next one on the same
// connection (Kafka's KafkaChannel refuses re-authentications less than a second apart).
const minReauthInterval = 1100 * time.Millisecond

// reauthDue returns when a session granted lifetime at start should re-authenticate: due, after
// a random 80-90% of it, as the Java client does, so that the connections of a process spread
// their exchanges, but not before minReauthInterval unless the lifetime is shorter; and early,
// half as far from start (not before minReauthInterval either, nor after due), from when a
// request written while others are in flight re-authenticates first. Such a request reaches the
// broker only once those are answered (a broker reads a connection's requests one at a time), so
// written just before due it could arrive past the lifetime. Both are zero when the session does
// not expire.
func reauthDue(start time.Time, lifetime time.Duration) (due, early time.Time) {
	if lifetime <= 0 {
		return time.Time{}, time.Time{}
	}
	d := time.Duration(float64(lifetime) * (0.8 + 0.1*rand.Float64()))
	if d < minReauthInterval {
		d = min(minReauthInterval, lifetime*95/100)
	}
	e := min(max(d/2, minReauthInterval), d)
	return start.Add(d), start.Add(e)
}

// reauthConn is an authenticated connection that re-authenticates its SASL session in place
// (SaslHandshake then SaslAuthenticate, KIP-368) before the first request it writes after its
// due time, or after its early time when requests are in flight (see reauthDue), once every
// request it carries was answered: the exchange has the connection to itself, and the caller's
// requests and responses pass through unchanged. A request that has to re-authenticate first is
// never written without it: when the requests in flight are not answered within reauthTimeout,
// the write fails with errReauthPending and writes nothing. The exchange may begin past the
// lifetime (a broker accepts a SaslHandshake then; it closes the connection for any other
// request). It follows the requests' and responses' frames (each is a 4-byte size and that many
// bytes) to know where a request starts and how many are unanswered. Requests without a response
// (Produce with acks=0) would keep it from re-authenticating; kdedup sends none. A failed
// re-authentication fails the write that waited for it, and the caller's client closes the
// connection and dials again. Writes must come from one goroutine at a time, and so must reads,
// as kafka-go's connections do.
type reauthConn struct {
	net.Conn
	auth *authenticator

	wf, rf frames     // the written requests' and read responses' frames
	rmu    sync.Mutex // held while reading from Conn, so an exchange is never read by the caller

	mu          sync.Mutex
	due         time.Time     // when to re-authenticate; zero: never
	early       time.Time     // when to re-authenticate if requests are in flight; zero: never
	idleWait    time.Duration // how long to wait for the requests in flight; zero: reauthTimeout
	onWait      func()        // called when a write starts waiting for them (tests); nil: none
	outstanding int           // requests written and not yet answered
	idle        chan struct{} // closed when outstanding drops to 0
	rdl, wdl    time.Time     // the caller's deadlines, restored after an exchange
}

// Write writes p, re-authenticating first when p starts a request and the session is due.
func (c *reauthConn) Write(p []byte) (int, error) {
	if c.wf.boundary() {
		if err := c.maybeReauthenticate(); err != nil {
			return 0, err
		}
	}
	if n := c.wf.feed(p, true); n > 0 {
		c.mu.Lock()
		if c.outstanding == 0 {
			c.idle = make(chan struct{})
		}
		c.outstanding += n
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

// Read reads responses and counts the ones that completed.
func (c *reauthConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	n, err := c.Conn.Read(p)
	done := c.rf.feed(p[:n], false)
	c.rmu.Unlock()
	if done > 0 {
		c.mu.Lock()
		c.outstanding = max(c.outstanding-done, 0)
		if c.outstanding == 0 && c.idle != nil {
			close(c.idle)
			c.idle = nil
		}
		c.mu.Unlock()
	}
	return n, err
}

// SetDeadline sets the read and write deadlines, and remembers them for after an exchange.
func (c *reauthConn) SetDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl, c.wdl = t, t
	c.mu.Unlock()
	return c.Conn.SetDeadline(t)
}

// SetReadDeadline sets the read deadline, and remembers it for after an exchange.
func (c *reauthConn) SetReadDeadline(t time.Time) error {
	c.mu.Lock()
	c.rdl = t
	c.mu.Unlock()
	return c.Conn.SetReadDeadline(t)
}

// SetWriteDeadline sets the write deadline, and remembers it for after an exchange.
func (c *reauthConn) SetWriteDeadline(t time.Time) error {
	c.mu.Lock()
	c.wdl = t
	c.mu.Unlock()
	return c.Conn.SetWriteDeadline(t)
}

// maybeReauthenticate re-authenticates when the session is due (or early, with requests in
// flight), once every request was answered. It returns errReauthPending when they were not
// answered within the idle wait, and the exchange's error when it failed.
func (c *reauthConn) maybeReauthenticate() error {
	c.mu.Lock()
	due, early, busy, wait := c.due, c.early, c.outstanding > 0, c.idleWait
	c.mu.Unlock()
	now := time.Now()
	if due.IsZero() || now.Before(early) || (now.Before(due) && !busy) {
		return nil
	}
	if wait <= 0 {
		wait = reauthTimeout
	}
	if c.onWait != nil {
		c.onWait()
	}
	if !c.waitIdle(wait) {
		return fmt.Errorf("kafkaio: broker %s:%d: %w", c.auth.host, c.auth.port, errReauthPending)
	}
	c.rmu.Lock()
	defer c.rmu.Unlock()
	start := time.Now()
	_ = c.Conn.SetDeadline(start.Add(reauthTimeout))
	ctx, cancel := context.WithTimeout(context.Background(), reauthTimeout)
	lifetime, err := c.auth.authenticate(ctx, c.Conn)
	cancel()
	c.mu.Lock()
	defer c.mu.Unlock()
	_ = c.Conn.SetReadDeadline(c.rdl)
	_ = c.Conn.SetWriteDeadline(c.wdl)
	if err != nil {
		return fmt.Errorf("kafkaio: re-authenticating the SASL session with broker %s:%d: %w", c.auth.host, c.auth.port, err)
	}
	c.due, c.early = reauthDue(start, lifetime)
	reauthentications.Add(1)
	return nil
}

// waitIdle waits until every request written was answered, at most d, and reports whether it was.
func (c *reauthConn) waitIdle(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		c.mu.Lock()
		idle, ch := c.outstanding == 0, c.idle
		c.mu.Unlock()
		if idle {
			return true
		}
		select {
		case <-ch:
		case <-t.C:
			return false
		}
	}
}

// frames follows the frames of one direction of a Kafka connection. It is used by one goroutine
// at a time.
type frames struct {
	hdr  [4]byte
	hdrN int   // bytes of hdr read of the current frame's size
	left int64 // bytes of the current frame's body still to come
}

// boundary reports whether the next byte starts a frame.
func (f *frames) boundary() bool { return f.hdrN == 0 && f.left == 0 }

// feed follows p and returns how many frames started in it (starts) or ended in it (!starts).
func (f *frames) feed(p []byte, starts bool) int {
	n := 0
	for len(p) > 0 {
		if f.left == 0 {
			if f.hdrN == 0 && starts {
				n++
			}
			k := copy(f.hdr[f.hdrN:], p)
			f.hdrN += k
			p = p[k:]
			if f.hdrN < 4 {
				break
			}
			f.hdrN = 0
			f.left = int64(binary.BigEndian.Uint32(f.hdr[:]))
			if f.left == 0 && !starts {
				n++
			}
			continue
		}
		k := int64(len(p))
		if k > f.left {
			k = f.left
		}
		f.left -= k
		p = p[k:]
		if f.left == 0 && !starts {
			n++
		}
	}
	return n
}
