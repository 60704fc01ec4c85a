package main

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/dedup"
	"github.com/kdedup/kdedup/window"
)

func TestInspectCommand(t *testing.T) {
	golden := filepath.Join("..", "..", "checkpoint", "snapshot", "testdata", "golden-v2.snap")
	data, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	damaged := filepath.Join(t.TempDir(), "damaged.snap")
	bad := bytes.Clone(data)
	bad[len(bad)-1] ^= 0xff // the file checksum
	if err := os.WriteFile(damaged, bad, 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
		wantErr  string
	}{
		{"golden", []string{"inspect", golden}, 0, "generation", ""},
		{"damaged", []string{"inspect", damaged}, 1, "generation", "damaged.snap"},
		{"missing", []string{"inspect", filepath.Join(t.TempDir(), "nope")}, 1, "", "no such file"},
		{"usage", []string{"inspect"}, 2, "", "usage: kdedup inspect FILE"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			code := run(context.Background(), tt.args, nil, &stdout, &stderr)
			if code != tt.wantCode {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tt.wantCode, stderr.String())
			}
			if !strings.Contains(strings.ToLower(stdout.String()), tt.wantOut) {
				t.Errorf("stdout lacks %q:\n%s", tt.wantOut, stdout.String())
			}
			if !strings.Contains(stderr.String(), tt.wantErr) {
				t.Errorf("stderr %q lacks %q", stderr.String(), tt.wantErr)
			}
		})
	}
}

func TestHealthcheckCommand(t *testing.T) {
	for _, tt := range []struct {
		status   int
		wantCode int
	}{{http.StatusOK, 0}, {http.StatusServiceUnavailable, 1}} {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Path != "/healthz" {
				http.NotFound(w, r)
				return
			}
			w.WriteHeader(tt.status)
		}))
		_, port, _ := net.SplitHostPort(srv.Listener.Addr().String())
		var stderr bytes.Buffer
		code := run(context.Background(), []string{"healthcheck"}, map[string]string{"HTTP_ADDR": ":" + port}, &bytes.Buffer{}, &stderr)
		srv.Close()
		if code != tt.wantCode {
			t.Errorf("status %d: exit %d, want %d (%s)", tt.status, code, tt.wantCode, stderr.String())
		}
	}
	// Nothing listening.
	if code := run(context.Background(), []string{"healthcheck"}, map[string]string{"HTTP_ADDR": "127.0.0.1:1"}, &bytes.Buffer{}, &bytes.Buffer{}); code != 1 {
		t.Errorf("no server: exit %d, want 1", code)
	}
}

// TestInspectManifestCommand inspects a checkpoint the directory store holds: its manifest, with
// the generation objects beside it, and one generation object; a manifest whose object is gone
// exits 1 and says which.
func TestInspectManifestCommand(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	store, err := checkpoint.OpenLocation(ctx, checkpoint.Location{Scheme: checkpoint.SchemeFile, Dir: dir}, checkpoint.Options{Keep: 3})
	if err != nil {
		t.Fatal(err)
	}
	f, err := window.New(window.Config{Generations: 3, Interval: time.Minute, Capacity: 1000, FalsePositiveRate: 1e-3})
	if err != nil {
		t.Fatal(err)
	}
	f.TestAndAdd([]byte("a"))
	p := dedup.NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
	info := dedup.SnapshotInfo{Scope: dedup.ScopePartition, Topic: "orders", InputOffsets: map[int32]int64{}}
	ref, _, err := p.Save(ctx, "orders.p0", f, info, func(context.Context) error { return nil })
	if err != nil {
		t.Fatal(err)
	}
	gens, _ := filepath.Glob(filepath.Join(dir, "*.gen"))
	if len(gens) != 1 {
		t.Fatalf("store holds generation objects %v, want one", gens)
	}
	manifest := filepath.Join(dir, ref.Name)
	var stdout, stderr bytes.Buffer
	if code := run(ctx, []string{"inspect", manifest}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "generation objects:") {
		t.Fatalf("inspect manifest: exit %d, stderr %s\n%s", code, stderr.String(), stdout.String())
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", gens[0]}, nil, &stdout, &stderr); code != 0 || !strings.Contains(stdout.String(), "generation object") {
		t.Fatalf("inspect generation object: exit %d, stderr %s\n%s", code, stderr.String(), stdout.String())
	}
	if err := os.Remove(gens[0]); err != nil {
		t.Fatal(err)
	}
	stdout.Reset()
	if code := run(ctx, []string{"inspect", manifest}, nil, &stdout, &stderr); code != 1 || !strings.Contains(stdout.String(), "DAMAGED") {
		t.Fatalf("inspect manifest without its object: exit %d, want 1 and the object DAMAGED\n%s", code, stdout.String())
	}
}
