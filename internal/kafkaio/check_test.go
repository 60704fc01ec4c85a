package kafkaio_test

import (
	"context"
	"crypto/tls"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/testpki"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// TestCheck proves that Conn.Check names every connection failure retrying cannot fix, within
// seconds, and never shows the password: wrong password and wrong user (for each mechanism),
// a mechanism the broker lacks, no SASL against a SASL broker, an unknown CA, a name mismatch,
// an expired certificate, a missing client certificate, and TLS on one side only. A broker that
// is down is not fatal.
func TestCheck(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	pki := newSecurePKI(t)
	expired, err := pki.ca.Issue(testpki.LeafOptions{Name: "old", Hosts: []string{"127.0.0.1"},
		NotBefore: time.Now().Add(-48 * time.Hour), NotAfter: time.Now().Add(-24 * time.Hour)})
	if err != nil {
		t.Fatal(err)
	}
	other, err := testpki.NewCA("another CA")
	if err != nil {
		t.Fatal(err)
	}
	start := func(t *testing.T, opts ...kfake.Opt) []string {
		c, err := kfake.NewCluster(append([]kfake.Opt{kfake.Ports(0)}, opts...)...)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(c.Close)
		return c.ListenAddrs()
	}
	serverTLS := kfake.TLS(testpki.ServerTLS(pki.broker, nil))
	mutualTLS := kfake.TLS(testpki.ServerTLS(pki.broker, pki.ca.Pool()))
	trusted := &tls.Config{RootCAs: pki.ca.Pool()}
	withCert := &tls.Config{RootCAs: pki.ca.Pool(), Certificates: []tls.Certificate{pki.client.TLS}}
	sasl := func(mech, user, pw string) *kafkaio.SASL {
		m, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: mech, Username: user, Password: pw})
		if err != nil {
			t.Fatal(err)
		}
		return m
	}
	for _, tc := range []struct {
		name   string
		broker []kfake.Opt
		tls    *tls.Config
		sasl   *kafkaio.SASL
		kind   error    // nil: Check succeeds
		says   []string // in the message
	}{
		{"plain ok", []kfake.Opt{serverTLS, kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "pw-Zq9")}, trusted, sasl("PLAIN", "u", "pw-Zq9"), nil, nil},
		{"mutual ok", []kfake.Opt{mutualTLS}, withCert, nil, nil, nil},
		{"plain wrong password", []kfake.Opt{serverTLS, kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "pw-Zq9")}, trusted, sasl("PLAIN", "u", "wrong-Zq9"),
			kafkaio.ErrAuthentication, []string{"SASL authentication failed", "PLAIN", `"u"`}},
		{"scram-512 wrong password", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-512", "u", "pw-Zq9")}, nil, sasl("SCRAM-SHA-512", "u", "wrong-Zq9"),
			kafkaio.ErrAuthentication, []string{"SASL authentication failed", "SCRAM-SHA-512", `"u"`}},
		{"scram-256 wrong user", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "u", "pw-Zq9")}, nil, sasl("SCRAM-SHA-256", "nobody", "pw-Zq9"),
			kafkaio.ErrAuthentication, []string{"SCRAM-SHA-256", `"nobody"`}},
		{"mechanism not enabled", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("SCRAM-SHA-256", "u", "pw-Zq9")}, nil, sasl("SCRAM-SHA-512", "u", "pw-Zq9"),
			kafkaio.ErrAuthentication, []string{"SCRAM-SHA-512"}},
		{"no sasl against sasl", []kfake.Opt{kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "pw-Zq9")}, nil, nil,
			kafkaio.ErrAuthentication, []string{"KAFKA_SASL_MECHANISM"}},
		{"unknown authority", []kfake.Opt{kfake.TLS(testpki.ServerTLS(pki.broker, nil))}, &tls.Config{RootCAs: other.Pool()}, nil,
			kafkaio.ErrTLS, []string{"unknown authority", "KAFKA_TLS_CA_FILE"}},
		{"name mismatch", []kfake.Opt{serverTLS}, &tls.Config{RootCAs: pki.ca.Pool(), ServerName: "elsewhere.test"}, nil,
			kafkaio.ErrTLS, []string{"name mismatch", "KAFKA_TLS_SERVER_NAME"}},
		{"expired", []kfake.Opt{kfake.TLS(testpki.ServerTLS(expired, nil))}, trusted, nil, kafkaio.ErrTLS, []string{"expired"}},
		{"no client certificate", []kfake.Opt{mutualTLS}, trusted, nil, kafkaio.ErrTLS, []string{"KAFKA_TLS_CERT_FILE"}},
		{"plaintext against tls", []kfake.Opt{serverTLS}, nil, nil, kafkaio.ErrTLS, []string{"KAFKA_TLS_ENABLED=true"}},
		{"tls against plaintext", nil, trusted, nil, kafkaio.ErrTLS, []string{"KAFKA_TLS_ENABLED=false"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			conn := kafkaio.Conn{Brokers: start(t, tc.broker...), TLS: tc.tls}
			if tc.sasl != nil {
				conn.SASL = tc.sasl
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			begin := time.Now()
			err := conn.Check(ctx)
			if took := time.Since(begin); took > 10*time.Second {
				t.Errorf("Check took %v", took)
			}
			if tc.kind == nil {
				if err != nil {
					t.Fatalf("Check = %v", err)
				}
				return
			}
			if !errors.Is(err, tc.kind) || !kafkaio.Fatal(err) {
				t.Fatalf("Check = %v, want a fatal %v", err, tc.kind)
			}
			for _, s := range tc.says {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("%q does not say %q", err, s)
				}
			}
			if strings.Contains(err.Error(), "Zq9") {
				t.Errorf("%q shows a password", err)
			}
		})
	}
	t.Run("broker down", func(t *testing.T) {
		t.Parallel()
		err := kafkaio.Conn{Brokers: []string{"127.0.0.1:1"}}.Check(context.Background())
		if err == nil || kafkaio.Fatal(err) {
			t.Errorf("Check = %v, want a non-fatal error", err)
		}
	})
}

// TestDenied proves that Denied names the operation and resource of an authorization error code
// and leaves other errors alone.
func TestDenied(t *testing.T) {
	err := kafkaio.Denied(kafka.GroupAuthorizationFailed, "READ", `group "g"`)
	if !errors.Is(err, kafkaio.ErrAuthorization) || !errors.Is(err, kafka.GroupAuthorizationFailed) ||
		!strings.Contains(err.Error(), `READ on group "g"`) {
		t.Errorf("Denied = %v", err)
	}
	if err := kafkaio.Denied(kafka.RequestTimedOut, "READ", "x"); err != kafka.RequestTimedOut {
		t.Errorf("Denied of another error = %v", err)
	}
}

// tooManyConnects makes c answer every SaslAuthenticate with SASL_AUTHENTICATION_FAILED and the
// message AWS MSK with IAM gives when it throttles new connections, while on is true.
func tooManyConnects(c *kfake.Cluster, on func() bool) {
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		if !on() {
			return nil, nil, false
		}
		res := req.ResponseKind().(*kmsg.SASLAuthenticateResponse)
		res.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Too many connects"
		res.ErrorMessage = &msg
		return res, nil, true
	})
}

// TestCheckThrottled proves that a broker throttling new connections ("Too many connects") is not
// a fatal authentication failure: Check's error wraps ErrThrottled, and RetryReason names it.
func TestCheckThrottled(t *testing.T) {
	t.Parallel()
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.EnableSASL(), kfake.Superuser("PLAIN", "u", "pw-Zq9"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tooManyConnects(c, func() bool { return true })
	m, _ := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: "PLAIN", Username: "u", Password: "pw-Zq9"})
	err = kafkaio.Conn{Brokers: c.ListenAddrs(), SASL: m}.Check(context.Background())
	if !errors.Is(err, kafkaio.ErrThrottled) || kafkaio.Fatal(err) || kafkaio.RetryReason(err) != kafkaio.ReasonThrottled {
		t.Errorf("Check = %v (reason %q), want a throttled, non-fatal error", err, kafkaio.RetryReason(err))
	}
}
