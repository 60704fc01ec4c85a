package s3test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/tier"
)

// RequireMotoEnv is the environment variable that makes StartMoto fail,
// rather than skip, when moto_server is not installed. CI sets it to "1".
const RequireMotoEnv = "KDEDUP_REQUIRE_MOTO"

// Moto is a moto_server process serving S3 on 127.0.0.1.
type Moto struct {
	endpoint string
	cmd      *exec.Cmd
	exited   chan struct{}
	log      *syncBuffer
}

// syncBuffer collects the server's output for failure messages.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// ErrNoMoto is returned by NewMoto when moto_server is not on PATH.
var ErrNoMoto = errors.New("s3test: moto_server is not on PATH")

// StartMoto starts moto_server (see NewMoto) and stops it when the test
// ends. Without moto_server on PATH it skips the test, or fails it when
// KDEDUP_REQUIRE_MOTO=1; see Unavailable.
func StartMoto(t testing.TB) *Moto {
	t.Helper()
	tier.Integration(t)
	m, err := NewMoto()
	if err != nil {
		Unavailable(t, err)
	}
	t.Cleanup(m.Stop)
	return m
}

// Unavailable ends a test that needed moto: it skips on ErrNoMoto unless
// KDEDUP_REQUIRE_MOTO=1, and fails otherwise.
func Unavailable(t testing.TB, err error) {
	t.Helper()
	if errors.Is(err, ErrNoMoto) && os.Getenv(RequireMotoEnv) != "1" {
		t.Skipf("%v (set %s=1 to make this a failure)", err, RequireMotoEnv)
	}
	if errors.Is(err, ErrNoMoto) {
		t.Fatalf("%v but %s=1: install it (pip install 'moto[server]')", err, RequireMotoEnv)
	}
	t.Fatalf("moto_server did not start: %v", err)
}

// NewMoto starts moto_server on a free port of 127.0.0.1 and waits until
// it answers. The port is found by binding 127.0.0.1:0 and releasing it; if
// moto cannot bind it because something else took it meanwhile, NewMoto
// retries with another port. The caller must call Stop.
func NewMoto() (*Moto, error) {
	bin, err := exec.LookPath("moto_server")
	if err != nil {
		return nil, ErrNoMoto
	}
	var errs []error
	for range 5 {
		m, err := startMoto(bin)
		if err == nil {
			return m, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func startMoto(bin string) (*Moto, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	m := &Moto{endpoint: "http://127.0.0.1:" + strconv.Itoa(port), exited: make(chan struct{}), log: &syncBuffer{}}
	m.cmd = exec.Command(bin, "-H", "127.0.0.1", "-p", strconv.Itoa(port))
	m.cmd.Stdout, m.cmd.Stderr = m.log, m.log
	m.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := m.cmd.Start(); err != nil {
		return nil, err
	}
	go func() { _ = m.cmd.Wait(); close(m.exited) }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if m.answers() {
			return m, nil
		}
		select {
		case <-m.exited:
			return nil, fmt.Errorf("moto_server on port %d exited: %s", port, m.log.String())
		case <-time.After(100 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			m.Stop()
			return nil, fmt.Errorf("moto_server on port %d did not answer within 30s: %s", port, m.log.String())
		}
	}
}

// answers reports whether the server responds to HTTP.
func (m *Moto) answers() bool {
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, m.endpoint+"/", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return true
}

// Stop ends the server's process group: SIGTERM, then SIGKILL after 5
// seconds. It returns when the process has exited.
func (m *Moto) Stop() {
	pgid := m.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-m.exited:
	case <-time.After(5 * time.Second):
		_ = syscall.Kill(-pgid, syscall.SIGKILL)
		<-m.exited
	}
}

// Endpoint returns the base URL of the server, for S3Options.Endpoint.
func (m *Moto) Endpoint() string { return m.endpoint }

// CreateBucket creates a bucket with a plain HTTP PUT /bucket.
func (m *Moto) CreateBucket(t testing.TB, name string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPut, m.endpoint+"/"+name, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("creating bucket %s: %v", name, err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("creating bucket %s: HTTP %s", name, resp.Status)
	}
}
