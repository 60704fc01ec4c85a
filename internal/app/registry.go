package app

// The schema registry of DEDUP_KEY=avro:PATH and protobuf:PATH (and the same forms of
// DEDUP_METRICS_SOURCE): its settings, their validation, the client and the start-up check.

import (
	"context"
	"crypto/tls"
	"fmt"
	"log/slog"
	"time"

	"github.com/kdedup/kdedup/identity"
)

// RegistryConfig is the SCHEMA_REGISTRY_* section.
type RegistryConfig struct {
	RegistryURL           string        `env:"URL" desc:"Base URL of the schema registry (Confluent Schema Registry REST API, as Confluent, Redpanda, Karapace and Apicurio serve it), such as http://schema-registry:8081. Required when DEDUP_KEY or DEDUP_METRICS_SOURCE reads Avro or Protobuf (avro:PATH, protobuf:PATH and their -key forms); the worker checks at start that it answers. Schemas are fetched once per id and kept for the life of the process."`
	RegistryUsername      string        `env:"USERNAME" secret:"true" desc:"User name of HTTP basic auth with the schema registry (Confluent Cloud: the API key)."`
	RegistryPassword      string        `env:"PASSWORD" secret:"true" desc:"Password of SCHEMA_REGISTRY_USERNAME (Confluent Cloud: the API secret; never logged)."`
	RegistryTLSCAFile     string        `env:"TLS_CA_FILE" desc:"PEM file of the CA certificates that verify an https:// schema registry (default: the system pool)."`
	RegistryTLSCertFile   string        `env:"TLS_CERT_FILE" desc:"PEM client certificate for mutual TLS with the schema registry, with SCHEMA_REGISTRY_TLS_KEY_FILE."`
	RegistryTLSKeyFile    string        `env:"TLS_KEY_FILE" desc:"PEM private key of SCHEMA_REGISTRY_TLS_CERT_FILE."`
	RegistryTLSServerName string        `env:"TLS_SERVER_NAME" desc:"Name the schema registry's certificate is verified against, when the URL's host is not in it. Empty: the URL's host."`
	RegistryTimeout       time.Duration `env:"TIMEOUT" envDefault:"10s" desc:"Bound of one schema registry request. A registry that is down, times out or answers 5xx holds the partitions that need a schema it has not served yet (retried with backoff, kdedup_identity_held_partitions, not ready after 30s); no record passes as unkeyed meanwhile."`
}

// TLSConfig returns the TLS configuration of the registry client, nil for Go's defaults. On
// failure it also returns the variable at fault.
func (r RegistryConfig) TLSConfig() (*tls.Config, string, error) {
	if r.RegistryTLSCAFile == "" && r.RegistryTLSCertFile == "" && r.RegistryTLSKeyFile == "" && r.RegistryTLSServerName == "" {
		return nil, "", nil
	}
	return tlsFiles("SCHEMA_REGISTRY_TLS_", r.RegistryTLSCAFile, r.RegistryTLSCertFile, r.RegistryTLSKeyFile, r.RegistryTLSServerName)
}

// needsRegistry reports whether DEDUP_KEY or DEDUP_METRICS_SOURCE reads a schema registry.
func needsRegistry(d DedupConfig) bool {
	if ks, err := identity.Parse(d.Key); err == nil && ks.Kind.Schemas() {
		return true
	}
	if d.MetricsSource == "" {
		return false
	}
	ss, err := identity.ParseSource(d.MetricsSource)
	return err == nil && ss.Kind.Schemas()
}

// validateRegistry reports the SCHEMA_REGISTRY_* problems.
func (c Config) validateRegistry(add func(name, format string, args ...any)) {
	r := c.Registry
	if needsRegistry(c.Dedup) && r.RegistryURL == "" {
		add("SCHEMA_REGISTRY_URL", "required: DEDUP_KEY or DEDUP_METRICS_SOURCE reads Avro or Protobuf records")
	}
	if r.RegistryURL != "" {
		if _, err := identity.NewRegistry(identity.RegistryConfig{URL: r.RegistryURL}); err != nil {
			add("SCHEMA_REGISTRY_URL", "%v", err)
		}
	}
	if r.RegistryTimeout <= 0 {
		add("SCHEMA_REGISTRY_TIMEOUT", "must be positive, got %v", r.RegistryTimeout)
	}
	if r.RegistryPassword != "" && r.RegistryUsername == "" {
		add("SCHEMA_REGISTRY_USERNAME", "required with SCHEMA_REGISTRY_PASSWORD")
	}
	if _, name, err := r.TLSConfig(); err != nil {
		add(name, "%v", err)
	}
}

// registryCheckTimeout bounds the start-up check that the schema registry answers.
const registryCheckTimeout = 30 * time.Second

// newRegistry returns the schema registry client, checked to answer, or nil when no setting
// reads one. The error names SCHEMA_REGISTRY_URL.
func newRegistry(ctx context.Context, cfg Config, log *slog.Logger) (identity.Registry, error) {
	if !needsRegistry(cfg.Dedup) {
		return nil, nil
	}
	r := cfg.Registry
	tc, _, err := r.TLSConfig()
	if err != nil {
		return nil, err
	}
	reg, err := identity.NewRegistry(identity.RegistryConfig{URL: r.RegistryURL, Username: r.RegistryUsername,
		Password: r.RegistryPassword, TLS: tc, Timeout: r.RegistryTimeout})
	if err != nil {
		return nil, err
	}
	cctx, cancel := context.WithTimeout(ctx, registryCheckTimeout)
	defer cancel()
	if err := reg.Check(cctx); err != nil {
		return nil, fmt.Errorf("SCHEMA_REGISTRY_URL: the schema registry does not answer: %w", err)
	}
	log.Info("schema registry", "url", r.RegistryURL)
	return reg, nil
}
