package app

import (
	"crypto/tls"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/testpki"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// secureSetup is a secured embedded cluster and the files and variables a worker needs to
// reach it.
type secureSetup struct {
	cl      testbroker.Broker
	environ map[string]string
	ca      *testpki.CA
}

// secureOptions describe a secured cluster: its SASL user, whether it requires client
// certificates, and the name its certificate holds (only that name, not 127.0.0.1: the worker
// needs KAFKA_TLS_SERVER_NAME).
type secureOptions struct {
	mech, user, password string
	mutual               bool
	certName             string
	acls                 []kfake.ACL // with acls not nil: ACLs are enforced and user has only these
}

// startSecure starts a 4-partition cluster that requires TLS with a test CA and SASL, and
// returns the worker environment (restartEnviron plus the KAFKA_TLS_* and KAFKA_SASL_*
// variables) that reaches it.
func startSecure(t *testing.T, o secureOptions) secureSetup {
	t.Helper()
	tier.Integration(t)
	ca, err := testpki.NewCA("kdedup test CA")
	must(t, err)
	hosts := []string{"127.0.0.1"}
	if o.certName != "" {
		hosts = []string{o.certName}
	}
	broker, err := ca.Issue(testpki.LeafOptions{Name: "broker", Hosts: hosts})
	must(t, err)
	client, err := ca.Issue(testpki.LeafOptions{Name: "kdedup", Client: true})
	must(t, err)
	var clientCAs = ca.Pool()
	if !o.mutual {
		clientCAs = nil
	}
	mech, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: o.mech, Username: "admin", Password: "admin-pw"})
	must(t, err)
	tc := &tls.Config{RootCAs: ca.Pool(), Certificates: []tls.Certificate{client.TLS}, ServerName: o.certName}
	listen := []kfake.Opt{kfake.TLS(testpki.ServerTLS(broker, clientCAs)), kfake.EnableSASL(),
		kfake.Superuser(o.mech, "admin", "admin-pw")}
	switch {
	case o.acls != nil:
		listen = append(listen, kfake.EnableACLs(), kfake.User(o.mech, o.user, o.password, o.acls...))
	case o.user != "admin":
		listen = append(listen, kfake.Superuser(o.mech, o.user, o.password))
	}
	cl, err := embedkafka.Start(embedkafka.Options{
		Topics:   map[string]int32{"in": restartPartitions, "out": restartPartitions},
		Security: &embedkafka.Security{Listen: listen, Client: kafkaio.Conn{TLS: tc, SASL: mech}},
	})
	must(t, err)
	t.Cleanup(cl.Close)
	b := testbroker.FromFake(cl)
	dir := t.TempDir()
	caFile, err := testpki.WriteFile(dir, "ca.pem", ca.PEM)
	must(t, err)
	e := restartEnviron(b, "", "partition")
	e["KAFKA_TLS_ENABLED"], e["KAFKA_TLS_CA_FILE"] = "true", caFile
	e["KAFKA_SASL_MECHANISM"], e["KAFKA_SASL_USERNAME"], e["KAFKA_SASL_PASSWORD"] = strings.ToLower(o.mech), o.user, o.password
	if o.certName != "" {
		e["KAFKA_TLS_SERVER_NAME"] = o.certName
	}
	if o.mutual {
		e["KAFKA_TLS_CERT_FILE"], err = testpki.WriteFile(dir, "client.pem", client.CertPEM)
		must(t, err)
		e["KAFKA_TLS_KEY_FILE"], err = testpki.WriteFile(dir, "client-key.pem", client.KeyPEM)
		must(t, err)
	}
	return secureSetup{cl: b, environ: e, ca: ca}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBinarySecured runs the real binary against brokers that require TLS and SASL, one per
// mechanism (SCRAM-SHA-512 with mutual TLS and KAFKA_SASL_PASSWORD_FILE, PLAIN with a broker certificate that only holds a
// name other than its address, SCRAM-SHA-256 with a custom CA): a stream with duplicates comes
// out with nothing lost and nothing leaked, and the password shows in no log line, /metrics,
// /readyz or /healthz.
func TestBinarySecured(t *testing.T) {
	t.Parallel()
	for _, o := range []secureOptions{
		{mech: kafkaio.MechanismSCRAM512, user: "dedup", password: "pw-scram512-Zq9", mutual: true},
		{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-plain-Zq9", certName: "kafka.internal.test"},
		{mech: kafkaio.MechanismSCRAM256, user: "dedup", password: "pw-scram256-Zq9"},
	} {
		t.Run(o.mech, func(t *testing.T) {
			t.Parallel()
			for _, k := range testbroker.Kinds() {
				t.Run(string(k), func(t *testing.T) {
					s := secureOn(t, k, o, nil)
					if o.mutual { // the password from a file, as Kubernetes mounts a Secret
						pw, err := testpki.WriteFile(t.TempDir(), "password", []byte(o.password+"\n"))
						must(t, err)
						delete(s.environ, "KAFKA_SASL_PASSWORD")
						s.environ["KAFKA_SASL_PASSWORD_FILE"] = pw
					}
					recs, unique := genStream(rand.New(rand.NewPCG(1, 2)), 4000, 0.25, false)
					done := make(chan error, 1)
					produceStream(t.Context(), s.cl, recs, len(recs), 0, done)
					must(t, <-done)
					w := startWorker(t, s.environ)
					waitFor(t, w, 60*time.Second, "every input record committed", func() bool { return caughtUp(s.cl) })
					c := checkOutput(t, s.cl, unique)
					if c.lost != 0 || c.leaked != 0 {
						t.Errorf("%d lost, %d leaked of %d distinct identities", c.lost, c.leaked, len(unique))
					}
					seen := w.stderr.String()
					for _, path := range []string{"/metrics", "/readyz", "/healthz"} {
						_, body := httpGet(w.url(path))
						seen += body
					}
					select {
					case <-w.exited:
						t.Fatalf("worker exited (status %d); log:\n%s", w.code, tail(w.log(), logTail))
					default:
					}
					w.signal(t, syscall.SIGTERM)
					if code := w.wait(t, 20*time.Second); code != 0 {
						t.Errorf("exit status %d after SIGTERM", code)
					}
					if strings.Contains(seen+w.log(), o.password) {
						t.Errorf("the password appears in the log or the HTTP endpoints")
					}
				})
			}
		})
	}
}

// TestBinaryConnectFailures proves that the binary exits non-zero within 20s with a log line
// that names the failure, and never the password, when it cannot authenticate (wrong password,
// wrong user), cannot verify the broker (a CA that did not sign its certificate), speaks
// plaintext to a TLS listener, or is denied describing a topic, reading the input topic or its
// group by the ACLs.
func TestBinaryConnectFailures(t *testing.T) {
	t.Parallel()
	allow := func(rt kmsg.ACLResourceType, name string, op kmsg.ACLOperation) kfake.ACL {
		return kfake.ACL{Resource: rt, Name: name, Pattern: kmsg.ACLResourcePatternTypeLiteral, Operation: op, Allow: true}
	}
	topicsOnly := []kfake.ACL{
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationAll),
		allow(kmsg.ACLResourceTypeTopic, "out", kmsg.ACLOperationAll),
		allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite),
	}
	for _, tc := range []struct {
		name   string
		opts   secureOptions
		change func(s secureSetup, e map[string]string)
		says   []string
	}{
		{"wrong password", secureOptions{mech: kafkaio.MechanismSCRAM512, user: "dedup", password: "pw-Zq9-right"},
			func(_ secureSetup, e map[string]string) { e["KAFKA_SASL_PASSWORD"] = "pw-Zq9-wrong" },
			[]string{"SASL authentication failed", "SCRAM-SHA-512", `\"dedup\"`}},
		{"wrong user", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right"},
			func(_ secureSetup, e map[string]string) { e["KAFKA_SASL_USERNAME"] = "nobody" },
			[]string{"SASL authentication failed", "PLAIN", `\"nobody\"`}},
		{"wrong CA", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right"},
			func(s secureSetup, e map[string]string) {
				other, err := testpki.NewCA("another CA")
				must(t, err)
				e["KAFKA_TLS_CA_FILE"], err = testpki.WriteFile(t.TempDir(), "other.pem", other.PEM)
				must(t, err)
			},
			[]string{"TLS connection failed", "unknown authority"}},
		{"plaintext against TLS", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right"},
			func(_ secureSetup, e map[string]string) {
				delete(e, "KAFKA_TLS_ENABLED")
				delete(e, "KAFKA_TLS_CA_FILE")
			},
			[]string{"TLS connection failed", "KAFKA_TLS_ENABLED=true"}},
		{"topic ACL missing", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right",
			acls: []kfake.ACL{allow(kmsg.ACLResourceTypeGroup, "kdedup", kmsg.ACLOperationAll)}},
			nil, []string{"not authorized", "DESCRIBE", `topic \"in\"`}},
		{"group ACL missing", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right", acls: topicsOnly},
			nil, []string{"not authorized", "READ", `group \"kdedup\"`}},
		{"read ACL missing", secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9-right", acls: []kfake.ACL{
			allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe), allow(kmsg.ACLResourceTypeTopic, "out", kmsg.ACLOperationAll),
			allow(kmsg.ACLResourceTypeGroup, "kdedup", kmsg.ACLOperationAll),
			allow(kmsg.ACLResourceTypeCluster, "kafka-cluster", kmsg.ACLOperationIdempotentWrite)}},
			nil, []string{"not authorized", "READ", `topic \"in\"`}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			s := startSecure(t, tc.opts)
			if tc.change != nil {
				tc.change(s, s.environ)
			}
			w := startWorker(t, s.environ) // builds the binary first, once
			begin := time.Now()
			code := w.wait(t, 20*time.Second)
			log := w.log()
			if code == 0 {
				t.Errorf("exit status 0")
			}
			t.Logf("exit status %d after %v", code, time.Since(begin).Round(time.Millisecond))
			for _, want := range tc.says {
				if !strings.Contains(log, want) {
					t.Errorf("the log does not say %s:\n%s", want, tail(log, 10))
				}
			}
			if strings.Contains(log, "pw-Zq9") {
				t.Errorf("the log shows a password")
			}
		})
	}
}

// TestBinaryMSKIAMWired proves that the worker authenticates its connections with AWS_MSK_IAM
// when configured: kfake does not speak it, and the worker exits naming the mechanism the broker
// refused in the SASL handshake. It also proves that a mistyped variable is warned about with the
// closest known one.
func TestBinaryMSKIAMWired(t *testing.T) {
	t.Parallel()
	s := startSecure(t, secureOptions{mech: kafkaio.MechanismPlain, user: "dedup", password: "pw-Zq9"})
	e := s.environ
	delete(e, "KAFKA_SASL_USERNAME")
	delete(e, "KAFKA_SASL_PASSWORD")
	e["KAFKA_SASL_MECHANISM"], e["AWS_REGION"] = "AWS_MSK_IAM", "eu-west-1"
	e["AWS_ACCESS_KEY_ID"], e["AWS_SECRET_ACCESS_KEY"] = "AKIDEXAMPLE", "secret-Zq9"
	e["DEDUP_WINDOW_CONT"] = "4"
	w := startWorker(t, e)
	if code := w.wait(t, 20*time.Second); code == 0 {
		t.Errorf("exit status 0")
	}
	log := w.log()
	if !strings.Contains(log, "SASL authentication failed") || !strings.Contains(log, "does not enable mechanism AWS_MSK_IAM") {
		t.Errorf("the log does not name the mechanism:\n%s", tail(log, 10))
	}
	if strings.Contains(log, "Zq9") {
		t.Errorf("the log shows a secret")
	}
	if !strings.Contains(log, "unknown variable DEDUP_WINDOW_CONT is ignored; did you mean DEDUP_WINDOW_COUNT?") {
		t.Errorf("no warning about DEDUP_WINDOW_CONT:\n%s", tail(log, 10))
	}
}
