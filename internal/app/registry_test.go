package app

import (
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/identity/registrytest"
)

// TestRegistrySettings proves that every SCHEMA_REGISTRY_* problem, and a bad Avro or Protobuf
// path, is named at start, and that the password can come from a file.
func TestRegistrySettings(t *testing.T) {
	dir := t.TempDir()
	pw := filepath.Join(dir, "pw")
	if err := os.WriteFile(pw, []byte("s3cret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		env  map[string]string
		want []string // variables named by the problems; none: valid
	}{
		{"json needs none", map[string]string{"DEDUP_KEY": "json:meta.id"}, nil},
		{"avro without a registry", map[string]string{"DEDUP_KEY": "avro:meta.id"}, []string{"SCHEMA_REGISTRY_URL"}},
		{"protobuf source without a registry", map[string]string{"DEDUP_METRICS_SOURCE": "protobuf-key:tenant"}, []string{"SCHEMA_REGISTRY_URL"}},
		{"bad path", map[string]string{"DEDUP_KEY": "avro:meta..id", "SCHEMA_REGISTRY_URL": "http://r:8081"}, []string{"DEDUP_KEY"}},
		{"not a field name", map[string]string{"DEDUP_KEY": "protobuf:meta.1d", "SCHEMA_REGISTRY_URL": "http://r:8081"}, []string{"DEDUP_KEY"}},
		{"bad URL", map[string]string{"DEDUP_KEY": "avro:id", "SCHEMA_REGISTRY_URL": "r:8081"}, []string{"SCHEMA_REGISTRY_URL"}},
		{"password without user", map[string]string{"DEDUP_KEY": "avro:id", "SCHEMA_REGISTRY_URL": "http://r", "SCHEMA_REGISTRY_PASSWORD": "x"}, []string{"SCHEMA_REGISTRY_USERNAME"}},
		{"cert without key", map[string]string{"DEDUP_KEY": "avro:id", "SCHEMA_REGISTRY_URL": "https://r", "SCHEMA_REGISTRY_TLS_CERT_FILE": pw}, []string{"SCHEMA_REGISTRY_TLS_CERT_FILE"}},
		{"CA not PEM", map[string]string{"DEDUP_KEY": "avro:id", "SCHEMA_REGISTRY_URL": "https://r", "SCHEMA_REGISTRY_TLS_CA_FILE": pw}, []string{"SCHEMA_REGISTRY_TLS_CA_FILE"}},
		{"timeout", map[string]string{"DEDUP_KEY": "avro:id", "SCHEMA_REGISTRY_URL": "http://r", "SCHEMA_REGISTRY_TIMEOUT": "0s"}, []string{"SCHEMA_REGISTRY_TIMEOUT"}},
		{"password file", map[string]string{"DEDUP_KEY": "avro-key:id", "SCHEMA_REGISTRY_URL": "http://r",
			"SCHEMA_REGISTRY_USERNAME": "u", "SCHEMA_REGISTRY_PASSWORD_FILE": pw}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cfg, err := Load(withEnv(tc.env))
			var ce *ConfigError
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				if tc.env["SCHEMA_REGISTRY_PASSWORD_FILE"] != "" && cfg.Registry.RegistryPassword != "s3cret" {
					t.Errorf("password from the file: %q", cfg.Registry.RegistryPassword)
				}
				return
			}
			if !errors.As(err, &ce) {
				t.Fatalf("Load = %v, want a ConfigError", err)
			}
			for _, v := range tc.want {
				if !strings.Contains(err.Error(), v+":") {
					t.Errorf("error does not name %s:\n%v", v, err)
				}
			}
			if strings.Contains(err.Error(), "s3cret") {
				t.Error("the error shows a secret")
			}
		})
	}
}

// TestRegistryStartCheck proves that a registry that does not answer, or refuses the
// credentials, stops the start with an error naming SCHEMA_REGISTRY_URL, and that one that
// answers gives a client.
func TestRegistryStartCheck(t *testing.T) {
	r := registrytest.New()
	defer r.Close()
	r.RequireAuth("u", "p")
	log := slog.New(slog.DiscardHandler)
	load := func(extra map[string]string) Config {
		t.Helper()
		env := map[string]string{"DEDUP_KEY": "avro:meta.id"}
		for k, v := range extra {
			env[k] = v
		}
		cfg, err := Load(withEnv(env))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	if reg, err := newRegistry(context.Background(), load(map[string]string{"SCHEMA_REGISTRY_URL": r.URL(),
		"SCHEMA_REGISTRY_USERNAME": "u", "SCHEMA_REGISTRY_PASSWORD": "p"}), log); err != nil || reg == nil {
		t.Fatalf("newRegistry = %v, %v", reg, err)
	}
	if _, err := newRegistry(context.Background(), load(map[string]string{"SCHEMA_REGISTRY_URL": r.URL()}), log); err == nil ||
		!strings.Contains(err.Error(), "SCHEMA_REGISTRY_URL") || !strings.Contains(err.Error(), "401") {
		t.Errorf("without credentials: %v", err)
	}
	down := registrytest.New()
	down.Close()
	if _, err := newRegistry(context.Background(), load(map[string]string{"SCHEMA_REGISTRY_URL": down.URL()}), log); err == nil ||
		!strings.Contains(err.Error(), "SCHEMA_REGISTRY_URL") {
		t.Errorf("unreachable: %v", err)
	}
	if reg, err := newRegistry(context.Background(), Config{Dedup: DedupConfig{Key: "json:id"}}, log); reg != nil || err != nil {
		t.Errorf("json key: %v, %v; want no registry", reg, err)
	}
}
