package app

import (
	"crypto/tls"
	"math/rand/v2"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/testpki"
	"github.com/twmb/franz-go/pkg/kfake"
)

// secureSetup is a secured embedded cluster and the files and variables a worker needs to
// reach it.
type secureSetup struct {
	cl      *embedkafka.Cluster
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
	listen               []kfake.Opt // more options (ACLs, users)
}

// startSecure starts a 4-partition cluster that requires TLS with a test CA and SASL, and
// returns the worker environment (restartEnviron plus the KAFKA_TLS_* and KAFKA_SASL_*
// variables) that reaches it.
func startSecure(t *testing.T, o secureOptions) secureSetup {
	t.Helper()
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
	listen := append([]kfake.Opt{kfake.TLS(testpki.ServerTLS(broker, clientCAs)), kfake.EnableSASL(),
		kfake.Superuser(o.mech, "admin", "admin-pw")}, o.listen...)
	if o.user != "admin" {
		listen = append(listen, kfake.Superuser(o.mech, o.user, o.password))
	}
	cl, err := embedkafka.Start(embedkafka.Options{
		Topics:   map[string]int32{"in": restartPartitions, "out": restartPartitions},
		Security: &embedkafka.Security{Listen: listen, Client: kafkaio.Conn{TLS: tc, SASL: mech}},
	})
	must(t, err)
	t.Cleanup(cl.Close)
	dir := t.TempDir()
	caFile, err := testpki.WriteFile(dir, "ca.pem", ca.PEM)
	must(t, err)
	e := restartEnviron(cl, "", "partition")
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
	return secureSetup{cl: cl, environ: e, ca: ca}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestBinarySecured runs the real binary against brokers that require TLS and SASL, one per
// mechanism (SCRAM-SHA-512 with mutual TLS, PLAIN with a broker certificate that only holds a
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
			s := startSecure(t, o)
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
}
