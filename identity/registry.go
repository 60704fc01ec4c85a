package identity

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"
)

// RegistryConfig configures an HTTPRegistry.
type RegistryConfig struct {
	// URL is the registry's base URL, such as https://registry:8081 (a path prefix is kept).
	URL string
	// Username and Password, when Username is set, authenticate every request with HTTP basic
	// auth, as Confluent Schema Registry, Karapace and Redpanda expect.
	Username, Password string
	// TLS configures https connections (CA and client certificate). Nil: Go's defaults.
	TLS *tls.Config
	// Timeout bounds one request. Default DefaultRegistryTimeout.
	Timeout time.Duration
}

// DefaultRegistryTimeout is the default RegistryConfig.Timeout.
const DefaultRegistryTimeout = 10 * time.Second

// maxSchemaBytes bounds the body of a registry answer.
const maxSchemaBytes = 8 << 20

// maxReferenceDepth bounds the nesting of schema references.
const maxReferenceDepth = 32

// HTTPRegistry is a client of the Confluent Schema Registry REST API, as Confluent, Redpanda,
// Karapace and Apicurio's compatibility API serve it: GET /schemas/ids/{id} for a schema, and
// GET /subjects/{subject}/versions/{version} for each of its references. Every schema it fetched,
// and every id the registry answered 404 for, is kept for the life of the process: ids are
// immutable, so each is fetched once (404s up to a bound, so that made-up ids cannot grow the
// cache without end). It is safe for concurrent use; concurrent requests for the
// same id share one fetch.
type HTTPRegistry struct {
	base   *url.URL
	cfg    RegistryConfig
	client *http.Client

	mu       sync.Mutex
	done     map[string]registryResult // by request path
	unknown  int                       // entries of done that are 404s
	inflight map[string]chan struct{}
}

// registryResult is a kept answer: a schema, or an error wrapping ErrUnknownSchema.
type registryResult struct {
	s   Schema
	err error
}

// NewRegistry returns a client of the registry at cfg.URL. It returns an error prefixed
// "identity: " for a URL that is not absolute http or https. It does not connect: Check does.
func NewRegistry(cfg RegistryConfig) (*HTTPRegistry, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("identity: schema registry URL %q: want http://HOST[:PORT] or https://HOST[:PORT]", cfg.URL)
	}
	u.Path = strings.TrimSuffix(u.Path, "/")
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultRegistryTimeout
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.TLSClientConfig = cfg.TLS
	return &HTTPRegistry{
		base: u, cfg: cfg,
		client:   &http.Client{Transport: tr, Timeout: cfg.Timeout},
		done:     map[string]registryResult{},
		inflight: map[string]chan struct{}{},
	}, nil
}

// Check asks the registry for its subjects (GET /subjects) and returns nil if it answers 200: the
// URL, the credentials and TLS are right. Otherwise it returns an error prefixed "identity: ".
func (r *HTTPRegistry) Check(ctx context.Context) error {
	_, err := r.get(ctx, "/subjects")
	return err
}

// Schema returns schema id with its references resolved. It returns an error wrapping
// ErrUnknownSchema when the registry answers 404 for it or one of its references, and another
// error prefixed "identity: " when the registry could not be asked (refused, timed out, 5xx,
// 401): those are not kept.
func (r *HTTPRegistry) Schema(ctx context.Context, id uint32) (Schema, error) {
	return r.schema(ctx, "/schemas/ids/"+strconv.FormatUint(uint64(id), 10), 0)
}

// schemaJSON is the registry's answer for a schema id or a subject version.
type schemaJSON struct {
	Schema     string `json:"schema"`
	SchemaType string `json:"schemaType"`
	References []struct {
		Name    string `json:"name"`
		Subject string `json:"subject"`
		Version int    `json:"version"`
	} `json:"references"`
}

// schema returns the schema at path (fetched once) with its references.
func (r *HTTPRegistry) schema(ctx context.Context, path string, depth int) (Schema, error) {
	if depth > maxReferenceDepth {
		return Schema{}, fmt.Errorf("%w: references nest deeper than %d", ErrUnknownSchema, maxReferenceDepth)
	}
	for {
		r.mu.Lock()
		if res, ok := r.done[path]; ok {
			r.mu.Unlock()
			return res.s, res.err
		}
		wait, busy := r.inflight[path]
		if !busy {
			r.inflight[path] = make(chan struct{})
		}
		r.mu.Unlock()
		if !busy {
			break
		}
		select {
		case <-wait:
		case <-ctx.Done():
			return Schema{}, fmt.Errorf("identity: schema registry %s: %w", path, ctx.Err())
		}
	}
	s, err := r.fetch(ctx, path, depth)
	r.mu.Lock()
	switch {
	case err == nil:
		r.done[path] = registryResult{s, err}
	case errors.Is(err, ErrUnknownSchema) && r.unknown < maxUnknownIDs: // made-up ids: bounded
		r.done[path] = registryResult{s, err}
		r.unknown++
	}
	close(r.inflight[path])
	delete(r.inflight, path)
	r.mu.Unlock()
	return s, err
}

// fetch asks the registry for the schema at path and resolves its references.
func (r *HTTPRegistry) fetch(ctx context.Context, path string, depth int) (Schema, error) {
	body, err := r.get(ctx, path)
	if err != nil {
		return Schema{}, err
	}
	var sj schemaJSON
	if err := json.Unmarshal(body, &sj); err != nil {
		return Schema{}, fmt.Errorf("identity: schema registry %s: %w", path, err)
	}
	s := Schema{Type: strings.ToUpper(sj.SchemaType), Text: sj.Schema}
	for _, ref := range sj.References {
		rp := "/subjects/" + url.PathEscape(ref.Subject) + "/versions/" + strconv.Itoa(ref.Version)
		rs, err := r.schema(ctx, rp, depth+1)
		if err != nil {
			return Schema{}, err
		}
		s.References = append(s.References, Reference{Name: ref.Name, Subject: ref.Subject, Version: ref.Version, Schema: rs})
	}
	return s, nil
}

// get returns the body of a 200 answer to GET path. A 404 gives an error wrapping
// ErrUnknownSchema.
func (r *HTTPRegistry) get(ctx context.Context, path string) ([]byte, error) {
	u := *r.base
	u.Path += path
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, fmt.Errorf("identity: schema registry: %w", err)
	}
	req.Header.Set("Accept", "application/vnd.schemaregistry.v1+json, application/json")
	if r.cfg.Username != "" {
		req.SetBasicAuth(r.cfg.Username, r.cfg.Password)
	}
	resp, err := r.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("identity: schema registry: %w", err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSchemaBytes+1))
	switch {
	case err != nil:
		return nil, fmt.Errorf("identity: schema registry %s: reading the answer: %w", path, err)
	case resp.StatusCode == http.StatusNotFound:
		return nil, fmt.Errorf("%w: the registry answered 404 for %s: %s", ErrUnknownSchema, path, snippet(body))
	case resp.StatusCode != http.StatusOK:
		return nil, fmt.Errorf("identity: schema registry %s: %s: %s", path, resp.Status, snippet(body))
	case len(body) > maxSchemaBytes:
		return nil, fmt.Errorf("identity: schema registry %s: answer larger than %d bytes", path, maxSchemaBytes)
	}
	return body, nil
}

// snippet returns the start of an error body, for messages.
func snippet(b []byte) string {
	const n = 200
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}
