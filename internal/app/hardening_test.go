package app

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestHTTPServerClosesIdleConnections proves the server closes a keep-alive connection that stays
// idle past its idle timeout (the server used to keep it open indefinitely), and that the
// defaults set every timeout.
func TestHTTPServerClosesIdleConnections(t *testing.T) {
	lim := defaultHTTPLimits
	if lim.idle <= 0 || lim.write <= 0 || lim.read <= 0 || lim.readHeader <= 0 || lim.metricsInFlight <= 0 {
		t.Fatalf("default limits %+v leave something unbounded", lim)
	}
	lim.idle = 200 * time.Millisecond
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := newHTTPServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") }), lim)
	go srv.Serve(ln) //nolint:errcheck // ends with Close
	defer srv.Close()
	conn, err := net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	io.WriteString(conn, "GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	br := bufio.NewReader(conn)
	res, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, res.Body)
	res.Body.Close()
	conn.SetReadDeadline(time.Now().Add(30 * time.Second)) // far past the idle timeout: fails only if never closed
	if _, err := br.ReadByte(); !errors.Is(err, io.EOF) {
		t.Fatalf("idle connection: read %v, want EOF (closed by the server)", err)
	}
}

// TestWarnPlaintextSASL proves a warning at startup for SASL without TLS, and none with TLS.
func TestWarnPlaintextSASL(t *testing.T) {
	for _, tc := range []struct {
		k    KafkaConfig
		warn bool
	}{
		{KafkaConfig{SASLMechanism: "PLAIN"}, true},
		{KafkaConfig{SASLMechanism: "SCRAM-SHA-512"}, true},
		{KafkaConfig{SASLMechanism: "PLAIN", TLSEnabled: true}, false},
		{KafkaConfig{}, false},
	} {
		var buf bytes.Buffer
		warnPlaintextSASL(tc.k, slog.New(slog.NewTextHandler(&buf, nil)))
		if got := strings.Contains(buf.String(), "SASL over plaintext"); got != tc.warn {
			t.Errorf("%+v: warned %v, want %v: %s", tc.k, got, tc.warn, buf.String())
		}
	}
}

// TestS3CredentialsFromFiles proves the S3 checkpoint store's static credentials can come from
// files (AWS_ACCESS_KEY_ID_FILE and the others), as Kubernetes Secrets are mounted, and reach
// the store's options.
func TestS3CredentialsFromFiles(t *testing.T) {
	dir := t.TempDir()
	files := map[string]string{"AWS_ACCESS_KEY_ID": "AKIAFILE", "AWS_SECRET_ACCESS_KEY": "secret-from-file", "AWS_SESSION_TOKEN": "token-from-file"}
	extra := map[string]string{"CHECKPOINT_URL": "s3://bucket/prefix"}
	for name, v := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(v+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		extra[name+"_FILE"] = path
	}
	cfg, err := Load(withEnv(extra))
	if err != nil {
		t.Fatal(err)
	}
	if a := cfg.AWS; a.AccessKeyID != "AKIAFILE" || a.SecretAccessKey != "secret-from-file" || a.SessionToken != "token-from-file" {
		t.Fatalf("AWS credentials from files: %q, %q, %q", a.AccessKeyID, a.SecretAccessKey, a.SessionToken)
	}
}
