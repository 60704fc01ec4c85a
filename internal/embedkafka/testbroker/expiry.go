package testbroker

import (
	"encoding/binary"
	"io"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// The API keys of the SASL exchange.
const (
	keySASLHandshake    = 17
	keySASLAuthenticate = 36
)

// SessionExpiry makes kfake enforce a SASL session lifetime as a real broker with
// connections.max.reauth.ms does: kfake announces the lifetime in its SaslAuthenticate answers
// but never acts on it, so SessionExpiry wraps the connections kfake accepts and closes one that
// sends anything but a SaslHandshake or SaslAuthenticate once its session (started at the last
// SaslAuthenticate answer) is older than the lifetime. A SaslHandshake on an authenticated
// connection starts a re-authentication, which renews the session. It works on plaintext
// listeners only (kfake.TLS wraps the listener it returns). Its methods are safe for concurrent
// use.
type SessionExpiry struct {
	lifetime time.Duration

	accepted, expired, reauthenticated atomic.Int64
}

// NewSessionExpiry returns a SessionExpiry enforcing lifetime.
func NewSessionExpiry(lifetime time.Duration) *SessionExpiry {
	return &SessionExpiry{lifetime: lifetime}
}

// Opts returns the kfake options that make a cluster announce and enforce the lifetime.
func (s *SessionExpiry) Opts() []kfake.Opt {
	ms := strconv.FormatInt(s.lifetime.Milliseconds(), 10)
	return []kfake.Opt{kfake.ListenFn(s.listen), kfake.BrokerConfigs(map[string]string{"connections.max.reauth.ms": ms})}
}

// Accepted returns the number of connections accepted.
func (s *SessionExpiry) Accepted() int64 { return s.accepted.Load() }

// Expired returns the number of connections closed because their session expired.
func (s *SessionExpiry) Expired() int64 { return s.expired.Load() }

// Reauthenticated returns the number of re-authentications started on authenticated connections.
func (s *SessionExpiry) Reauthenticated() int64 { return s.reauthenticated.Load() }

func (s *SessionExpiry) listen(network, address string) (net.Listener, error) {
	ln, err := net.Listen(network, address)
	if err != nil {
		return nil, err
	}
	return expiryListener{ln, s}, nil
}

type expiryListener struct {
	net.Listener
	s *SessionExpiry
}

func (l expiryListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	l.s.accepted.Add(1)
	return &expiringConn{Conn: c, s: l.s}, nil
}

// expiringConn is one connection kfake accepted. kfake reads requests from it (whole frames are
// read ahead, so a request of an expired session is never seen) and writes responses to it (the
// responses come in the order of the requests, so the first unanswered request names each).
type expiringConn struct {
	net.Conn
	s       *SessionExpiry
	pending []byte // the rest of the request frame kfake is reading

	mu     sync.Mutex
	keys   []int16   // API keys of the requests not yet answered
	expiry time.Time // zero before the first authentication
	hdr    []byte    // the size of the response frame being written, while incomplete
	left   int       // bytes of the response frame being written still to come
}

func (c *expiringConn) Read(p []byte) (int, error) {
	if len(c.pending) == 0 {
		frame, err := readFrame(c.Conn)
		if err != nil {
			return 0, err
		}
		if !c.admit(int16(binary.BigEndian.Uint16(frame[4:]))) {
			c.s.expired.Add(1)
			c.Conn.Close()
			return 0, io.EOF
		}
		c.pending = frame
	}
	n := copy(p, c.pending)
	c.pending = c.pending[n:]
	return n, nil
}

// admit reports whether a request with API key may pass, and records it as unanswered.
func (c *expiringConn) admit(key int16) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	auth := key == keySASLHandshake || key == keySASLAuthenticate
	if !auth && !c.expiry.IsZero() && time.Now().After(c.expiry) {
		return false
	}
	if key == keySASLHandshake && !c.expiry.IsZero() {
		c.s.reauthenticated.Add(1)
	}
	c.keys = append(c.keys, key)
	return true
}

// readFrame reads one request: its size and that many bytes (at least an API key and version).
func readFrame(r io.Reader) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(r, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 256<<20 {
		return nil, io.ErrUnexpectedEOF
	}
	frame := make([]byte, 4+n)
	copy(frame, size[:])
	_, err := io.ReadFull(r, frame[4:])
	return frame, err
}

func (c *expiringConn) Write(p []byte) (int, error) {
	c.follow(p)
	return c.Conn.Write(p)
}

// follow follows the response frames in p; each one that starts answers the first unanswered
// request, and a SaslAuthenticate answer starts a session of the lifetime.
func (c *expiringConn) follow(p []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(p) > 0 {
		if c.left > 0 {
			k := min(c.left, len(p))
			c.left -= k
			p = p[k:]
			continue
		}
		k := min(4-len(c.hdr), len(p))
		c.hdr = append(c.hdr, p[:k]...)
		p = p[k:]
		if len(c.hdr) < 4 {
			return
		}
		c.left = int(binary.BigEndian.Uint32(c.hdr))
		c.hdr = c.hdr[:0]
		if len(c.keys) > 0 {
			if c.keys[0] == keySASLAuthenticate {
				c.expiry = time.Now().Add(c.s.lifetime)
			}
			c.keys = c.keys[1:]
		}
	}
}
