package main

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// runInspect prints a snapshot file's header, generations and checksum status. For a manifest
// (format v6) it reads the generation objects it references from the manifest's directory, where
// the directory store keeps them (copy them beside it to inspect a checkpoint of an S3 store); for
// a generation object (a .gen file) it prints its sections. It exits 1 when the file or an object
// it references is damaged or missing (after printing what it could read) and 2 on usage errors.
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
	magic := make([]byte, len(snapshot.GenMagic))
	if n, _ := f.ReadAt(magic, 0); n == len(magic) && string(magic) == snapshot.GenMagic {
		err = snapshot.InspectGen(stdout, f)
	} else {
		err = snapshot.InspectManifest(stdout, f, openBeside(filepath.Dir(args[0])))
	}
	if err != nil {
		fmt.Fprintf(stderr, "kdedup: %s: %v\n", args[0], err)
		return 1
	}
	return 0
}

// openBeside opens the generation objects a manifest references from dir.
func openBeside(dir string) snapshot.ObjectOpener {
	return func(name string) (io.ReadCloser, int64, error) {
		if filepath.Base(name) != name {
			return nil, 0, fmt.Errorf("object name %q is not a file name", name)
		}
		f, err := os.Open(filepath.Join(dir, name))
		if err != nil {
			return nil, 0, err
		}
		fi, err := f.Stat()
		if err != nil {
			f.Close()
			return nil, 0, err
		}
		return f, fi.Size(), nil
	}
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
