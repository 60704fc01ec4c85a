package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// child is a process started by livecheck. Its output goes to a log file; stop, or the end of
// the context it was started with, kills it with its whole process group. Not safe for
// concurrent use, except that done may be watched from any goroutine.
type child struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{} // closed when the process exited; err is set then
	err  error
}

// startChild starts bin with args in its own process group, output to logPath.
func startChild(ctx context.Context, name, logPath, bin string, args ...string) (*child, error) {
	out, err := os.Create(logPath)
	if err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Stdout, cmd.Stderr = out, out
	isolate(cmd)
	cmd.Cancel = func() error { return killGroup(cmd) }
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Start(); err != nil {
		out.Close()
		return nil, fmt.Errorf("start %s: %w", name, err)
	}
	c := &child{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() {
		c.err = cmd.Wait()
		out.Close()
		close(c.done)
	}()
	return c, nil
}

// exited reports whether the process has exited.
func (c *child) exited() bool {
	select {
	case <-c.done:
		return true
	default:
		return false
	}
}

// stop asks the process to exit (SIGTERM), waits up to grace, then kills its process group. It
// returns once the process is gone, and may be called more than once.
func (c *child) stop(grace time.Duration) {
	if !c.exited() {
		_ = c.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-c.done:
		case <-time.After(grace):
		}
	}
	_ = killGroup(c.cmd) // also anything the process left in its group
	<-c.done
}

// exitCode returns the exit status once the process has exited (-1 if it was killed).
func (c *child) exitCode() int {
	<-c.done
	var ee *exec.ExitError
	if errors.As(c.err, &ee) {
		return ee.ExitCode()
	}
	if c.err != nil {
		return -1
	}
	return 0
}

// logTail returns the last n lines of the process's output, for error messages.
func (c *child) logTail(n int) string {
	b, err := os.ReadFile(c.log)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return "  | " + strings.Join(lines, "\n  | ")
}

// freePort returns a TCP port on 127.0.0.1 that was free a moment ago.
func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

// scrapeInterval is Prometheus's scrape and rule evaluation interval in the live check.
const scrapeInterval = time.Second

// prometheusConfig is the configuration of the live check's Prometheus: one job named kdedup
// (the alerts select job=~".*kdedup.*") scraping the worker's address every second, and the test
// rule file.
const prometheusConfig = `# Written by tools/cmd/livecheck.
global:
  scrape_interval: 1s
  scrape_timeout: 1s
  evaluation_interval: 1s
rule_files:
  - %q
scrape_configs:
  - job_name: kdedup
    static_configs:
      - targets: [%q]
`

// prometheusServer is a Prometheus process with its own configuration and data directory.
type prometheusServer struct {
	*child
	api promAPI
}

// startPrometheus writes the configuration into dir, starts bin on a free port with its data in
// dir/data, and waits until it is ready (at most 60s). On failure nothing is left running.
func startPrometheus(ctx context.Context, bin, dir, rulesFile, target string) (*prometheusServer, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, fmt.Appendf(nil, prometheusConfig, rulesFile, target), 0o644); err != nil {
		return nil, err
	}
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	c, err := startChild(ctx, "prometheus", filepath.Join(dir, "prometheus.log"), bin,
		"--config.file="+cfg, "--storage.tsdb.path="+filepath.Join(dir, "data"),
		"--web.listen-address="+addr, "--log.level=warn")
	if err != nil {
		return nil, err
	}
	p := &prometheusServer{child: c, api: newPromAPI("http://" + addr)}
	if err := p.waitReady(ctx, 60*time.Second); err != nil {
		p.stop(5 * time.Second)
		return nil, fmt.Errorf("prometheus: %w\n%s", err, c.logTail(20))
	}
	return p, nil
}

// waitReady polls /-/ready until it answers 200, the process exits or within passes.
func (p *prometheusServer) waitReady(ctx context.Context, within time.Duration) error {
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		if resp, err := client.Get(p.api.base + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("exited before it was ready: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	return fmt.Errorf("not ready within %v", within)
}

// waitScraping waits until Prometheus has scraped the kdedup job once (its up series exists, 0
// or 1), at most within. Prometheus applies discovered targets every 5s, so without this wait
// the first seconds of a run, and the restart in them, would never be scraped.
func (p *prometheusServer) waitScraping(ctx context.Context, within time.Duration) error {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		now := time.Now()
		res, err := p.api.queryRange(ctx, `up{job="kdedup"}`, now.Add(-scrapeInterval), now, scrapeInterval)
		if err == nil && len(res) > 0 {
			return nil
		}
		select {
		case <-p.done:
			return fmt.Errorf("prometheus exited: %v", p.err)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("prometheus did not scrape the kdedup job within %v", within)
}

// version returns the server's version string, for the summary.
func (p *prometheusServer) version(ctx context.Context) string {
	var info struct {
		Version string `json:"version"`
	}
	if err := p.api.get(ctx, "/api/v1/status/buildinfo", nil, &info); err != nil {
		return "unknown (" + err.Error() + ")"
	}
	return info.Version
}

// bytesTrim is bytes.TrimSpace as a string, for short error bodies.
func bytesTrim(b []byte) string { return string(bytes.TrimSpace(b)) }
