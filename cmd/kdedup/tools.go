package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// runInspect prints a snapshot file's header, generations and checksum status. It exits 1 when
// the file is damaged (after printing what it could read) and 2 on usage errors.
func runInspect(args []string, stdout, stderr io.Writer) int {
	if len(args) != 1 {
		fmt.Fprintln(stderr, "usage: kdedup inspect FILE")
		return 2
	}
	f, err := os.Open(args[0])
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: %v\n", err)
		return 1
	}
	defer f.Close()
	if err := snapshot.Inspect(stdout, f); err != nil {
		fmt.Fprintf(stderr, "kdedup: %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// runHealthcheck asks the local worker's /healthz (on HTTP_ADDR's port) whether it is alive, for
// container health checks in images without curl. It exits 0 when the answer is 200.
func runHealthcheck(ctx context.Context, environ map[string]string, stderr io.Writer) int {
	addr := environ["HTTP_ADDR"]
	if addr == "" {
		addr = ":8080"
	}
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: HTTP_ADDR %q: %v\n", addr, err)
		return 2
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+net.JoinHostPort("127.0.0.1", port)+"/healthz", nil)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: %v\n", err)
		return 2
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: healthcheck: %v\n", err)
		return 1
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		fmt.Fprintf(stderr, "kdedup: healthcheck: %s\n", resp.Status)
		return 1
	}
	return 0
}
