package loadrun

import (
	"bytes"
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/app"
	"github.com/kdedup/kdedup/internal/embedkafka"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/testpki"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestLoadtestExternalSecured runs the standard workload shape (20% duplicates) in the
// loadtest's external mode against brokers that require TLS and SASL, TLS + SCRAM-SHA-512 and
// TLS + PLAIN, with the worker (app.Serve) configured by the same variables, the password from
// KAFKA_SASL_PASSWORD_FILE: the verifier must find nothing lost and nothing leaked, and the
// password must not be in the output of either.
func TestLoadtestExternalSecured(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	for _, mech := range []string{kafkaio.MechanismSCRAM512, kafkaio.MechanismPlain} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			env := startSecured(t, mech)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			cfg, err := app.Load(env)
			if err != nil {
				t.Fatal(err)
			}
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			var workerLog bytes.Buffer // slog's handler serializes the writes; read after Serve returned
			wctx, stop := context.WithCancel(ctx)
			served := make(chan int, 1)
			go func() { served <- app.Serve(wctx, cfg, ln, slog.New(slog.NewJSONHandler(&workerLog, nil))) }()
			var stdout, stderr bytes.Buffer
			// Under -short (the race run) fewer records and a longer settle: a worker slowed by the
			// race detector must not be judged before it delivered.
			count, settle := "20000", "3s"
			if testing.Short() {
				count, settle = "4000", "15s"
			}
			code := Loadtest(ctx, []string{"-quiet", "-count", count, "-dups", "0.2", "-settle", settle,
				"-mix", "immediate=0.5,within=0.5"}, env, &stdout, &stderr)
			stop()
			if wcode := <-served; wcode != 0 {
				t.Errorf("worker exit status %d; log:\n%s", wcode, workerLog.String())
			}
			out := stdout.String() + stderr.String()
			if code != 0 || !strings.Contains(out, " 0 lost") || !strings.Contains(out, " 0 leaked") {
				t.Fatalf("loadtest exit %d:\n%s", code, out)
			}
			t.Log(out)
			if strings.Contains(out+workerLog.String(), "pw-Zq9") {
				t.Errorf("the password appears in the loadtest's output or the worker's log")
			}
		})
	}
}

// startSecured starts a 4-partition cluster that requires TLS (a test CA) and SASL mech for the
// user kdedup, and returns the environment of a worker and a loadtest that reach it.
func startSecured(t *testing.T, mech string) map[string]string {
	t.Helper()
	ca, err := testpki.NewCA("kdedup test CA")
	if err != nil {
		t.Fatal(err)
	}
	broker, err := ca.Issue(testpki.LeafOptions{Name: "broker", Hosts: []string{"127.0.0.1"}})
	if err != nil {
		t.Fatal(err)
	}
	admin, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: mech, Username: "admin", Password: "admin-pw"})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := embedkafka.Start(embedkafka.Options{
		Topics: map[string]int32{"in": 4, "out": 4},
		Security: &embedkafka.Security{
			Listen: []kfake.Opt{kfake.TLS(testpki.ServerTLS(broker, nil)), kfake.EnableSASL(),
				kfake.Superuser(mech, "admin", "admin-pw"), kfake.Superuser(mech, "kdedup", "pw-Zq9")},
			Client: kafkaio.Conn{TLS: &tls.Config{RootCAs: ca.Pool()}, SASL: admin},
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	dir := t.TempDir()
	caFile, err := testpki.WriteFile(dir, "ca.pem", ca.PEM)
	if err != nil {
		t.Fatal(err)
	}
	pwFile, err := testpki.WriteFile(dir, "password", []byte("pw-Zq9\n"))
	if err != nil {
		t.Fatal(err)
	}
	return map[string]string{
		"KAFKA_BROKERS": strings.Join(cl.Addrs(), ","), "KAFKA_INPUT_TOPIC": "in", "KAFKA_OUTPUT_TOPIC": "out",
		"KAFKA_TLS_ENABLED": "true", "KAFKA_TLS_CA_FILE": caFile, "KAFKA_SASL_MECHANISM": mech,
		"KAFKA_SASL_USERNAME": "kdedup", "KAFKA_SASL_PASSWORD_FILE": pwFile,
		"KAFKA_SESSION_TIMEOUT": "2s", "KAFKA_HEARTBEAT_INTERVAL": "200ms", "KAFKA_COMMIT_INTERVAL": "200ms",
		"DEDUP_KEY": "header:event-id", "DEDUP_WINDOW_COUNT": "8", "DEDUP_WINDOW_INTERVAL": "2s",
		"DEDUP_WINDOW_CAPACITY": "100000", "HTTP_ADDR": "127.0.0.1:0", "SHUTDOWN_TIMEOUT": "10s",
	}
}
