package kafkaio

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// The kinds of connection failure that retrying cannot fix: the configuration (or the cluster's
// ACLs) must change. A *ConnError wraps one of them, so errors.Is tells them apart; Fatal
// reports whether an error is of one of them.
var (
	// ErrAuthentication is a failed SASL authentication: wrong credentials, a mechanism the
	// broker does not enable, or a broker that requires SASL when none is configured.
	ErrAuthentication = errors.New("SASL authentication failed")
	// ErrTLS is a failed TLS connection: a certificate that does not verify (unknown authority,
	// name mismatch, expired), a client certificate the broker refuses, or TLS on one side only.
	ErrTLS = errors.New("TLS connection failed")
	// ErrAuthorization is an operation the cluster's ACLs deny.
	ErrAuthorization = errors.New("not authorized")
)

// ConnError is a connection failure of one of the kinds above, with what to fix. Its message
// never holds a credential.
type ConnError struct {
	// Kind is ErrAuthentication, ErrTLS or ErrAuthorization.
	Kind error
	// Broker is the broker address, when the failure is one broker's.
	Broker string
	// Detail says what failed and what to change.
	Detail string
	// Err is the underlying error, when there is one.
	Err error
}

func (e *ConnError) Error() string {
	s := "kafkaio: " + e.Kind.Error()
	if e.Broker != "" {
		s += " (broker " + e.Broker + ")"
	}
	s += ": " + e.Detail
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the kind and the underlying error.
func (e *ConnError) Unwrap() []error {
	if e.Err == nil {
		return []error{e.Kind}
	}
	return []error{e.Kind, e.Err}
}

// ErrThrottled is a broker refusing a new connection because too many were opened: AWS MSK with
// IAM answers "Too many connects" to more than 20 a second per broker, as a whole group does
// when it rebalances. It is never fatal: Check wraps it for such a refusal, and Throttled tells
// it.
var ErrThrottled = errors.New("the broker throttles new connections")

// Throttled reports whether err is a broker throttling connections or requests: ErrThrottled, a
// failed authentication whose message says "Too many connects", or THROTTLING_QUOTA_EXCEEDED.
func Throttled(err error) bool {
	return err != nil && (errors.Is(err, ErrThrottled) || errors.Is(err, kafka.ThrottlingQuotaExceeded) ||
		strings.Contains(strings.ToLower(err.Error()), "too many connects"))
}

// The reasons a connection failure is retried for (RetryReason).
const (
	ReasonAuthentication = "authentication"
	ReasonTLS            = "tls"
	ReasonAuthorization  = "authorization"
	ReasonThrottled      = "throttled"
)

// RetryReasons returns every reason RetryReason returns.
func RetryReasons() []string {
	return []string{ReasonAuthentication, ReasonTLS, ReasonAuthorization, ReasonThrottled}
}

// RetryReason returns the reason of a connection failure that is fatal at startup (Fatal) or
// throttled (Throttled), and "" for any other error.
func RetryReason(err error) string {
	switch {
	case err == nil:
		return ""
	case Throttled(err):
		return ReasonThrottled
	case errors.Is(err, ErrAuthentication):
		return ReasonAuthentication
	case errors.Is(err, ErrTLS):
		return ReasonTLS
	case errors.Is(err, ErrAuthorization):
		return ReasonAuthorization
	}
	return ""
}

// Fatal reports whether err is an authentication, TLS or authorization failure (see ConnError),
// which retrying cannot fix.
func Fatal(err error) bool {
	return errors.Is(err, ErrAuthentication) || errors.Is(err, ErrTLS) || errors.Is(err, ErrAuthorization)
}

// AuthFailed returns a *ConnError of kind ErrAuthentication wrapping err when err is a SASL
// failure of a connection opened outside Check (the group's, a Client's):
// SASL_AUTHENTICATION_FAILED or UNSUPPORTED_SASL_MECHANISM, unless the broker throttles
// (Throttled). It returns err unchanged otherwise.
func AuthFailed(err error) error {
	if err == nil || Fatal(err) || Throttled(err) {
		return err
	}
	if errors.Is(err, kafka.SASLAuthenticationFailed) || errors.Is(err, kafka.UnsupportedSASLMechanism) {
		return &ConnError{Kind: ErrAuthentication, Err: err, Detail: "the broker refused the SASL authentication of a new connection"}
	}
	return err
}

// Denied returns a *ConnError of kind ErrAuthorization if err is one of Kafka's authorization
// error codes, naming the operation on the resource (such as "READ", "group \"kdedup\""), and
// err unchanged otherwise.
func Denied(err error, operation, resource string) error {
	for _, code := range []kafka.Error{kafka.TopicAuthorizationFailed, kafka.GroupAuthorizationFailed,
		kafka.ClusterAuthorizationFailed, kafka.TransactionalIDAuthorizationFailed} {
		if errors.Is(err, code) {
			return &ConnError{Kind: ErrAuthorization, Err: err,
				Detail: fmt.Sprintf("the ACLs do not allow %s on %s for this principal", operation, resource)}
		}
	}
	return err
}

// checkTimeout bounds one broker's connection in Check: the dial, the TLS handshake, SASL and
// the requests. A failed one may take another probeTimeout to tell what the listener speaks.
const checkTimeout, probeTimeout = 5 * time.Second, 2 * time.Second

// Check connects to the brokers of c one after the other, as every connection does (TCP, TLS,
// SASL), and sends an ApiVersions and a Metadata request (and one Metadata request for each of
// topics), until one broker answers (Check returns nil). A failure that retrying cannot fix is
// returned at once as a *ConnError (see Fatal) that names it: a topic the ACLs do not let the
// client describe, SASL authentication (with the mechanism and user, never the password),
// TLS verification (unknown authority, name mismatch, expired certificate), a client certificate
// the broker refuses, TLS against a plaintext listener and the reverse. A broker that throttles
// new connections ("Too many connects") is not such a failure: its error wraps ErrThrottled.
// Otherwise it returns the last broker's error (network failures: retry). Each broker's check
// takes at most 7s.
func (c Conn) Check(ctx context.Context, topics ...string) error {
	var last error
	for _, b := range c.Brokers {
		err := c.checkBroker(ctx, b, topics)
		if err == nil || Fatal(err) {
			return err
		}
		last = err
	}
	return last
}

// checkBroker checks one broker; see Check.
func (c Conn) checkBroker(ctx context.Context, addr string, topics []string) error {
	answered, tr, err := c.connectOnce(ctx, addr, topics)
	if err == nil || Fatal(err) || ctx.Err() != nil {
		return err
	}
	return c.classify(ctx, addr, err, tr, answered)
}

// connectOnce connects to addr and sends an ApiVersions and a Metadata request, within
// checkTimeout. answered tells that the broker answered the ApiVersions request; tr, when not
// nil, whether a SASL exchange started.
func (c Conn) connectOnce(ctx context.Context, addr string, topics []string) (answered bool, tr *trackedSASL, err error) {
	ctx, cancel := context.WithTimeout(ctx, checkTimeout)
	defer cancel()
	if c.SASL != nil {
		tr = &trackedSASL{Mechanism: c.SASL}
		c.SASL = tr
	}
	d := c.Dialer()
	d.Timeout = checkTimeout
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err == nil {
		deadline, _ := ctx.Deadline()
		_ = conn.SetDeadline(deadline)
		if _, err = conn.ApiVersions(); err == nil {
			answered = true
			_, err = conn.Brokers()
		}
		for _, t := range topics {
			if err != nil {
				break
			}
			// One request per topic, not through a Client's metadata cache, which reports a
			// topic the ACLs hide as unknown. Other topic errors are the caller's to report.
			if _, terr := conn.ReadPartitions(t); errors.Is(terr, kafka.TopicAuthorizationFailed) {
				err = Denied(terr, "DESCRIBE", fmt.Sprintf("topic %q", t))
			}
		}
		conn.Close()
	}
	return answered, tr, err
}

// CheckRead returns a *ConnError of kind ErrAuthorization naming READ on topic if the ACLs do
// not let the client read it, and nil otherwise: it fetches at most one byte of partition 0 from
// offset 0, which consumes nothing (an offset out of range means reading is allowed). Other
// failures are left to the reads themselves.
func CheckRead(ctx context.Context, c *kafka.Client, topic string) error {
	res, err := c.Fetch(ctx, &kafka.FetchRequest{Topic: topic, Partition: 0, Offset: 0, MinBytes: 1, MaxBytes: 1,
		MaxWait: 10 * time.Millisecond})
	if err == nil {
		err = res.Error
	}
	if errors.Is(err, kafka.TopicAuthorizationFailed) {
		return Denied(err, "READ", fmt.Sprintf("topic %q", topic))
	}
	return nil
}

// trackedSASL is a SASL mechanism that records that an exchange started, so that a connection
// closed during it is known to be an authentication failure.
type trackedSASL struct {
	sasl.Mechanism
	started atomic.Bool
}

func (t *trackedSASL) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	t.started.Store(true)
	return t.Mechanism.Start(ctx)
}

// classify turns the error of a broker's check into a *ConnError when it is one of the fatal
// kinds; see Check. answered tells that the broker answered the ApiVersions request.
func (c Conn) classify(ctx context.Context, addr string, err error, tr *trackedSASL, answered bool) error {
	if Throttled(err) {
		return fmt.Errorf("kafkaio: %w (broker %s): %w", ErrThrottled, addr, err)
	}
	if ce := classifyTLS(err); ce != nil {
		ce.Broker = addr
		return ce
	}
	who := ""
	if c.SASL != nil {
		who = describeSASL(c.SASL)
	}
	switch {
	case errors.Is(err, kafka.UnsupportedSASLMechanism):
		return &ConnError{Kind: ErrAuthentication, Broker: addr, Err: err,
			Detail: fmt.Sprintf("the broker does not enable mechanism %s (KAFKA_SASL_MECHANISM)", c.SASL.Name())}
	case errors.Is(err, kafka.SASLAuthenticationFailed) || (tr != nil && tr.started.Load() && closed(err)):
		return &ConnError{Kind: ErrAuthentication, Broker: addr, Err: err,
			Detail: fmt.Sprintf("%s: the broker refused the credentials or closed the connection during the exchange; check the user and password", who)}
	case c.SASL == nil && answered && closed(err):
		return &ConnError{Kind: ErrAuthentication, Broker: addr, Err: err,
			Detail: "no SASL mechanism is configured and the broker closed the connection after the first request: it probably requires SASL (set KAFKA_SASL_MECHANISM)"}
	case c.TLS == nil && closed(err) && speaksTLS(ctx, addr):
		return &ConnError{Kind: ErrTLS, Broker: addr, Err: err,
			Detail: "the listener expects TLS but the client speaks plaintext: set KAFKA_TLS_ENABLED=true (or use the plaintext listener's port)"}
	case c.TLS != nil && !answered && speaksPlaintext(ctx, addr):
		return &ConnError{Kind: ErrTLS, Broker: addr, Err: err,
			Detail: "the listener is plaintext but the client speaks TLS: set KAFKA_TLS_ENABLED=false (or use the TLS listener's port)"}
	}
	return err
}

// classifyTLS returns a *ConnError for a TLS failure, or nil.
func classifyTLS(err error) *ConnError {
	var unknown x509.UnknownAuthorityError
	var host x509.HostnameError
	var invalid x509.CertificateInvalidError
	var header tls.RecordHeaderError
	ce := &ConnError{Kind: ErrTLS, Err: err}
	switch {
	case errors.As(err, &unknown):
		ce.Detail = "the broker's certificate is signed by an unknown authority: set KAFKA_TLS_CA_FILE to the CA certificates that signed it"
	case errors.As(err, &host):
		ce.Detail = fmt.Sprintf("the broker's certificate is not valid for the name %q (name mismatch): connect by a name it holds, or set KAFKA_TLS_SERVER_NAME to one", host.Host)
	case errors.As(err, &invalid) && invalid.Reason == x509.Expired:
		ce.Detail = "the broker's certificate has expired or is not valid yet (check the broker's certificate and this machine's clock)"
	case errors.As(err, &invalid):
		ce.Detail = "the broker's certificate is not valid"
	case errors.As(err, &header):
		ce.Detail = "the broker answered the TLS handshake with something else: the listener is plaintext; set KAFKA_TLS_ENABLED=false (or use the TLS listener's port)"
	case strings.Contains(err.Error(), "remote error: tls:"):
		ce.Detail = "the broker refused the TLS handshake, as it does a missing or untrusted client certificate when it requires mutual TLS (KAFKA_TLS_CERT_FILE, KAFKA_TLS_KEY_FILE)"
	default:
		return nil
	}
	return ce
}

// closed reports whether err is the peer closing or resetting the connection.
func closed(err error) bool {
	return errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, net.ErrClosed)
}

// speaksPlaintext reports whether addr answers an ApiVersions request in plaintext.
func speaksPlaintext(ctx context.Context, addr string) bool {
	conn, err := (&kafka.Dialer{Timeout: probeTimeout}).DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(probeTimeout))
	_, err = conn.ApiVersions()
	return err == nil
}

// speaksTLS reports whether addr completes a TLS handshake (without verifying the certificate:
// only the protocol is in question).
func speaksTLS(ctx context.Context, addr string) bool {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	d := tls.Dialer{NetDialer: &net.Dialer{},
		Config: &tls.Config{InsecureSkipVerify: true}} //nolint:gosec // probing the protocol, nothing is sent
	conn, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return false
	}
	conn.Close()
	return true
}
