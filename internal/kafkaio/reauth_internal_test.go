package kafkaio

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// readRequest reads one request frame from c and returns it without its size.
func readRequest(c net.Conn) ([]byte, error) {
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		return nil, err
	}
	req := make([]byte, binary.BigEndian.Uint32(size[:]))
	_, err := io.ReadFull(c, req)
	return req, err
}

// fakeSASLBroker answers SaslHandshake and SaslAuthenticate v1 requests on c with success and
// a lifetime, and sends each SaslAuthenticate's bytes to auths, until c is closed.
func fakeSASLBroker(c net.Conn, lifetime time.Duration, auths chan<- []byte) {
	for {
		req, err := readRequest(c)
		if err != nil {
			return
		}
		key, corr := binary.BigEndian.Uint16(req), req[4:8]
		body := req[10+int(binary.BigEndian.Uint16(req[8:])):]
		res := append([]byte{0, 0, 0, 0}, corr...)
		if key == apiSASLHandshake {
			res = append(res, 0, 0, 0, 0, 0, 0) // no error, no mechanisms
		} else {
			auths <- body[4:]
			res = append(res, 0, 0, 0xff, 0xff, 0, 0, 0, 0) // no error, null message, no bytes
			res = binary.BigEndian.AppendUint64(res, uint64(lifetime.Milliseconds()))
		}
		binary.BigEndian.PutUint32(res, uint32(len(res)-4))
		if _, err := c.Write(res); err != nil {
			return
		}
	}
}

// TestReauthenticateIAMFreshCredentials proves that AWS_MSK_IAM signs every exchange, the
// re-authentications included, with the credentials its provider returns then (as IRSA tokens
// rotate), and that the exchange reads the session lifetime the broker announces.
func TestReauthenticateIAMFreshCredentials(t *testing.T) {
	var n atomic.Int64
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: fmt.Sprintf("AKID%d", n.Add(1)), SecretAccessKey: "secret-Zq9"}, nil
	})
	m, err := NewSASL(SASLConfig{Mechanism: MechanismAWSMSKIAM, AWSCredentials: creds, AWSRegion: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	a, err := newAuthenticator(m, "kdedup", "b-1.msk.example.com:9098")
	if err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	defer client.Close()
	auths := make(chan []byte, 2)
	go fakeSASLBroker(server, 90*time.Second, auths)
	for i := 1; i <= 2; i++ {
		lifetime, err := a.authenticate(context.Background(), client)
		if err != nil || lifetime != 90*time.Second {
			t.Fatalf("exchange %d: lifetime %v, %v", i, lifetime, err)
		}
		var payload map[string]string
		if err := json.Unmarshal(<-auths, &payload); err != nil {
			t.Fatal(err)
		}
		if want := fmt.Sprintf("AKID%d/", i); !strings.HasPrefix(payload["x-amz-credential"], want) {
			t.Errorf("exchange %d signed with %q, want the credentials %s…", i, payload["x-amz-credential"], want)
		}
	}
}

// TestFrames proves that frames tells the starts and ends of frames however the bytes are split.
func TestFrames(t *testing.T) {
	var stream []byte
	for _, n := range []int{0, 3, 10} {
		stream = binary.BigEndian.AppendUint32(stream, uint32(n))
		stream = append(stream, make([]byte, n)...)
	}
	for _, chunk := range []int{1, 2, 3, 5, 7, len(stream)} {
		var starts, ends frames
		s, e := 0, 0
		for i := 0; i < len(stream); i += chunk {
			p := stream[i:min(i+chunk, len(stream))]
			s += starts.feed(p, true)
			e += ends.feed(p, false)
		}
		if s != 3 || e != 3 || !starts.boundary() || !ends.boundary() {
			t.Errorf("chunks of %d: %d starts, %d ends, want 3 and 3 and a boundary at the end", chunk, s, e)
		}
	}
}

// TestReauthDue proves when a session re-authenticates: never without a lifetime, after 80-90%
// of it, and not sooner than a broker accepts (minReauthInterval) unless the lifetime is shorter;
// with requests in flight half as far from the start, not sooner than minReauthInterval either,
// and never after due.
func TestReauthDue(t *testing.T) {
	start := time.Unix(1000, 0)
	for _, tc := range []struct {
		lifetime, lo, hi time.Duration // hi exclusive; lo == hi == 0: never
	}{
		{0, 0, 0},
		{time.Hour, 48 * time.Minute, 54 * time.Minute},
		{3 * time.Second, 2400 * time.Millisecond, 2700 * time.Millisecond},
		{time.Second + 200*time.Millisecond, minReauthInterval, minReauthInterval + 1},
		{time.Second, 950 * time.Millisecond, 950*time.Millisecond + 1},
	} {
		for range 100 {
			due, early := reauthDue(start, tc.lifetime)
			if tc.lifetime == 0 {
				if !due.IsZero() || !early.IsZero() {
					t.Fatalf("lifetime 0: due %v, early %v, want never", due, early)
				}
				continue
			}
			d := due.Sub(start)
			if d < tc.lo || d >= tc.hi {
				t.Fatalf("lifetime %v: due after %v, want [%v, %v)", tc.lifetime, d, tc.lo, tc.hi)
			}
			if e, want := early.Sub(start), min(max(d/2, minReauthInterval), d); e != want {
				t.Fatalf("lifetime %v, due after %v: early after %v, want %v", tc.lifetime, d, e, want)
			}
		}
	}
}

// heldBroker is a fake broker on one connection that answers SaslHandshake and SaslAuthenticate
// v1 with success and a lifetime at once, holds the answer to every other request until a value
// arrives on release, and sends the API key of every request it reads to seen, in order.
func heldBroker(c net.Conn, lifetime time.Duration, seen chan<- int16, release <-chan struct{}) {
	for {
		req, err := readRequest(c)
		if err != nil {
			return
		}
		key := int16(binary.BigEndian.Uint16(req))
		seen <- key
		res := append([]byte{0, 0, 0, 0}, req[4:8]...)
		switch key {
		case apiSASLHandshake:
			res = append(res, 0, 0, 0, 0, 0, 0) // no error, no mechanisms
		case apiSASLAuthenticate:
			res = append(res, 0, 0, 0xff, 0xff, 0, 0, 0, 0) // no error, null message, no bytes
			res = binary.BigEndian.AppendUint64(res, uint64(lifetime.Milliseconds()))
		default:
			if _, ok := <-release; !ok {
				return
			}
			res = append(res, 0)
		}
		binary.BigEndian.PutUint32(res, uint32(len(res)-4))
		if _, err := c.Write(res); err != nil {
			return
		}
	}
}

// heldConn returns a reauthConn to a heldBroker (AWS_MSK_IAM, which the fake accepts), with the
// broker's seen and release channels.
func heldConn(t *testing.T, lifetime time.Duration) (*reauthConn, <-chan int16, chan<- struct{}) {
	t.Helper()
	creds := aws.CredentialsProviderFunc(func(context.Context) (aws.Credentials, error) {
		return aws.Credentials{AccessKeyID: "AKID", SecretAccessKey: "secret-Zq9"}, nil
	})
	m, err := NewSASL(SASLConfig{Mechanism: MechanismAWSMSKIAM, AWSCredentials: creds, AWSRegion: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	client, server := net.Pipe()
	seen, release := make(chan int16, 16), make(chan struct{})
	go heldBroker(server, lifetime, seen, release)
	t.Cleanup(func() { close(release); client.Close(); server.Close() })
	rc, err := Conn{SASL: m}.authenticate(context.Background(), client, "b-1.example.com:9098")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []int16{apiSASLHandshake, apiSASLAuthenticate} {
		if k := <-seen; k != want {
			t.Fatalf("the first exchange sent API key %d, want %d", k, want)
		}
	}
	return rc, seen, release
}

// metadataRequest returns a request frame (Metadata v0, no client ID) with correlation id corr.
func metadataRequest(corr int32) []byte {
	f := binary.BigEndian.AppendUint32(nil, 14)
	f = binary.BigEndian.AppendUint16(f, 3)
	f = binary.BigEndian.AppendUint16(f, 0)
	f = binary.BigEndian.AppendUint32(f, uint32(corr))
	f = binary.BigEndian.AppendUint16(f, 0)
	return binary.BigEndian.AppendUint32(f, 0) // no topics
}

// readAnswer reads one answer frame from c.
func readAnswer(t *testing.T, c net.Conn) {
	t.Helper()
	var size [4]byte
	if _, err := io.ReadFull(c, size[:]); err != nil {
		t.Error(err)
		return
	}
	if _, err := io.ReadFull(c, make([]byte, binary.BigEndian.Uint32(size[:]))); err != nil {
		t.Error(err)
	}
}

// TestReauthQueuedBehindHeldAnswer proves that a request written behind an unanswered one once
// the session is past its early time (here: not yet due) re-authenticates first, after the held
// answer came: a broker reads the request only once the one before is answered, which can be
// past the session's lifetime. Written at once, as before, it would reach the broker first.
func TestReauthQueuedBehindHeldAnswer(t *testing.T) {
	rc, seen, release := heldConn(t, time.Hour)
	rc.mu.Lock()
	rc.early, rc.due = time.Now().Add(-time.Millisecond), time.Now().Add(time.Minute)
	waiting := make(chan struct{}, 1)
	rc.onWait = func() { waiting <- struct{}{} }
	rc.mu.Unlock()
	if _, err := rc.Write(metadataRequest(1)); err != nil {
		t.Fatal(err)
	}
	if k := <-seen; k != 3 {
		t.Fatalf("the first request reached the broker as API key %d, want 3", k)
	}
	written := make(chan error, 1)
	go func() { _, err := rc.Write(metadataRequest(2)); written <- err }()
	select {
	case <-waiting:
	case err := <-written:
		t.Fatalf("the second request was written (%v) without waiting for the answer before it", err)
	}
	release <- struct{}{}
	readAnswer(t, rc)
	if err := <-written; err != nil {
		t.Fatal(err)
	}
	for _, want := range []int16{apiSASLHandshake, apiSASLAuthenticate, 3} {
		if k := <-seen; k != want {
			t.Fatalf("after the held answer the broker read API key %d, want %d (re-authentication, then the request)", k, want)
		}
	}
	if rc.due.Before(time.Now().Add(30 * time.Minute)) {
		t.Errorf("due %v after re-authenticating for an hour, want about 48-54 minutes from now", time.Until(rc.due))
	}
}

// TestReauthNeverWritesPastDue proves that a request due to re-authenticate whose connection's
// requests stay unanswered is not written without re-authenticating: the write fails with
// errReauthPending after the idle wait, and the broker reads nothing more.
func TestReauthNeverWritesPastDue(t *testing.T) {
	rc, seen, _ := heldConn(t, time.Hour)
	rc.mu.Lock()
	rc.early, rc.due, rc.idleWait = time.Now().Add(-time.Second), time.Now().Add(-time.Millisecond), 100*time.Millisecond
	rc.mu.Unlock()
	rc.wf.feed(metadataRequest(1), true) // a request in flight whose answer the broker holds
	rc.outstanding, rc.idle = 1, make(chan struct{})
	if _, err := rc.Write(metadataRequest(2)); !errors.Is(err, errReauthPending) {
		t.Fatalf("write behind an unanswered request past due: %v, want errReauthPending", err)
	}
	select {
	case k := <-seen:
		t.Fatalf("the broker read API key %d from a session past due, want nothing", k)
	case <-time.After(100 * time.Millisecond): // the absence of a write: nothing to wait for
	}
	if !rc.wf.boundary() {
		t.Error("the refused write left the request framing mid-frame")
	}
}
