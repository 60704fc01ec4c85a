package kafkaio

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// The API keys and versions of the SASL exchange. SaslHandshake v1 carries the mechanism's bytes
// in SaslAuthenticate requests; SaslAuthenticate v1 answers with the session lifetime
// (KIP-368), which kafka-go's own exchange (v0) never learns.
const (
	apiSASLHandshake    = 17
	apiSASLAuthenticate = 36
	saslWireVersion     = 1
)

// authenticator runs SASL exchanges for the connections to one broker. It is safe for
// concurrent use: each exchange starts its mechanism anew, so AWS_MSK_IAM signs every one with
// the credentials its provider returns then.
type authenticator struct {
	mech     sasl.Mechanism
	clientID string
	host     string
	port     int
}

// newAuthenticator returns the authenticator of mech for the broker at address (host:port).
func newAuthenticator(mech sasl.Mechanism, clientID, address string) (*authenticator, error) {
	host, p, err := net.SplitHostPort(address)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: SASL needs the broker's host and port: %w", err)
	}
	port, err := strconv.Atoi(p)
	if err != nil {
		return nil, fmt.Errorf("kafkaio: SASL needs the broker's port: %w", err)
	}
	return &authenticator{mech: mech, clientID: clientID, host: host, port: port}, nil
}

// authenticate runs one SASL exchange on rw (the first of a connection, or a re-authentication
// of an authenticated one) and returns the session lifetime the broker granted (0: the session
// does not expire). The exchange's request IDs are its own: rw must carry no other request
// meanwhile. A refusal is a kafka.Error (SASL_AUTHENTICATION_FAILED, UNSUPPORTED_SASL_MECHANISM,
// ...) with the broker's message; a connection the broker closed during the exchange (after the
// handshake) is kafka.SASLAuthenticationFailed, as brokers end some failed exchanges so.
func (a *authenticator) authenticate(ctx context.Context, rw io.ReadWriter) (time.Duration, error) {
	if err := a.handshake(rw); err != nil {
		return 0, err // a listener that speaks another protocol (TLS) closes here: Check tells it
	}
	ctx = sasl.WithMetadata(ctx, &sasl.Metadata{Host: a.host, Port: a.port})
	sm, state, err := a.mech.Start(ctx)
	if err != nil {
		return 0, fmt.Errorf("kafkaio: starting SASL %s: %w", a.mech.Name(), err)
	}
	var lifetime time.Duration
	for done := false; !done; {
		var challenge []byte
		challenge, lifetime, err = a.round(rw, state)
		if err != nil {
			return 0, eofAsAuthFailure(err)
		}
		if done, state, err = sm.Next(ctx, challenge); err != nil {
			return 0, fmt.Errorf("kafkaio: SASL %s: %w", a.mech.Name(), err)
		}
	}
	return lifetime, nil
}

// eofAsAuthFailure returns kafka.SASLAuthenticationFailed, wrapping err, when err is the broker
// closing the connection, and err otherwise.
func eofAsAuthFailure(err error) error {
	if closed(err) {
		return fmt.Errorf("%w: the broker closed the connection during the exchange: %w", kafka.SASLAuthenticationFailed, err)
	}
	return err
}

// handshake sends a SaslHandshake v1 naming the mechanism.
func (a *authenticator) handshake(rw io.ReadWriter) error {
	name := a.mech.Name()
	body := binary.BigEndian.AppendUint16(nil, uint16(len(name)))
	res, err := a.roundTrip(rw, apiSASLHandshake, append(body, name...))
	if err != nil {
		return err
	}
	if len(res) < 2 {
		return errors.New("kafkaio: short SaslHandshake response")
	}
	if code := int16(binary.BigEndian.Uint16(res)); code != 0 {
		return kafka.Error(code)
	}
	return nil
}

// round sends one SaslAuthenticate v1 with the mechanism's bytes and returns the broker's bytes
// and the session lifetime it announced.
func (a *authenticator) round(rw io.ReadWriter, state []byte) ([]byte, time.Duration, error) {
	body := binary.BigEndian.AppendUint32(nil, uint32(len(state)))
	res, err := a.roundTrip(rw, apiSASLAuthenticate, append(body, state...))
	if err != nil {
		return nil, 0, err
	}
	return parseAuthenticate(res)
}

// parseAuthenticate parses a SaslAuthenticate v1 response body: error code, error message,
// auth bytes, session lifetime in milliseconds.
func parseAuthenticate(b []byte) ([]byte, time.Duration, error) {
	short := errors.New("kafkaio: short SaslAuthenticate response")
	if len(b) < 4 {
		return nil, 0, short
	}
	code := int16(binary.BigEndian.Uint16(b))
	n := int(int16(binary.BigEndian.Uint16(b[2:])))
	b = b[4:]
	msg := ""
	if n > 0 {
		if len(b) < n {
			return nil, 0, short
		}
		msg, b = string(b[:n]), b[n:]
	}
	if code != 0 {
		return nil, 0, fmt.Errorf("%w: %s", kafka.Error(code), msg)
	}
	if len(b) < 4 {
		return nil, 0, short
	}
	n = int(int32(binary.BigEndian.Uint32(b)))
	if n < 0 {
		n = 0
	}
	if len(b) < 4+n+8 {
		return nil, 0, short
	}
	auth := b[4 : 4+n]
	ms := int64(binary.BigEndian.Uint64(b[4+n:]))
	return auth, time.Duration(max(ms, 0)) * time.Millisecond, nil
}

// roundTrip writes one request (header v1: key, version, correlation ID, client ID) and reads its
// response, returning the body after the correlation ID.
func (a *authenticator) roundTrip(rw io.ReadWriter, key int16, body []byte) ([]byte, error) {
	const correlation = 0x5a51 // any: the exchange has the connection to itself
	req := make([]byte, 4, 14+len(a.clientID)+len(body))
	req = binary.BigEndian.AppendUint16(req, uint16(key))
	req = binary.BigEndian.AppendUint16(req, saslWireVersion)
	req = binary.BigEndian.AppendUint32(req, correlation)
	req = binary.BigEndian.AppendUint16(req, uint16(len(a.clientID)))
	req = append(append(req, a.clientID...), body...)
	binary.BigEndian.PutUint32(req, uint32(len(req)-4))
	if _, err := rw.Write(req); err != nil {
		return nil, err
	}
	var size [4]byte
	if _, err := io.ReadFull(rw, size[:]); err != nil {
		return nil, err
	}
	n := binary.BigEndian.Uint32(size[:])
	if n < 4 || n > 1<<20 {
		return nil, fmt.Errorf("kafkaio: SASL response of %d bytes", n)
	}
	res := make([]byte, n)
	if _, err := io.ReadFull(rw, res); err != nil {
		return nil, err
	}
	if id := binary.BigEndian.Uint32(res); id != correlation {
		return nil, fmt.Errorf("kafkaio: SASL response to request %d, expected %d", id, correlation)
	}
	return res[4:], nil
}
