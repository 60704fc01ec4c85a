package kafkaio

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
)

// fakeSASLBroker answers SaslHandshake and SaslAuthenticate v1 requests on c with success and
// a lifetime, and sends each SaslAuthenticate's bytes to auths, until c is closed.
func fakeSASLBroker(c net.Conn, lifetime time.Duration, auths chan<- []byte) {
	for {
		var size [4]byte
		if _, err := io.ReadFull(c, size[:]); err != nil {
			return
		}
		req := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(c, req); err != nil {
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
// of it, and not sooner than a broker accepts (minReauthInterval) unless the lifetime is shorter.
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
			due := reauthDue(start, tc.lifetime)
			if tc.lifetime == 0 {
				if !due.IsZero() {
					t.Fatalf("lifetime 0: due %v, want never", due)
				}
				continue
			}
			if d := due.Sub(start); d < tc.lo || d >= tc.hi {
				t.Fatalf("lifetime %v: due after %v, want [%v, %v)", tc.lifetime, d, tc.lo, tc.hi)
			}
		}
	}
}
