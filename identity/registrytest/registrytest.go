// Package registrytest serves the part of the Confluent Schema Registry REST API that kdedup
// reads, in-process over HTTP, with fault switches: GET /schemas/ids/{id},
// GET /subjects/{subject}/versions/{version} and GET /subjects. It is for tests: no schema
// registry runs beside them.
package registrytest

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Reference is a reference of a registered schema, as the API spells it.
type Reference struct {
	Name    string `json:"name"`
	Subject string `json:"subject"`
	Version int    `json:"version"`
}

// schema is one registered schema version.
type schema struct {
	ID         int         `json:"id"`
	Subject    string      `json:"subject,omitempty"`
	Version    int         `json:"version,omitempty"`
	Schema     string      `json:"schema"`
	SchemaType string      `json:"schemaType,omitempty"`
	References []Reference `json:"references,omitempty"`
}

// Registry is an in-process schema registry. Create it with New; it is safe for concurrent use.
type Registry struct {
	srv *httptest.Server

	mu       sync.Mutex
	byID     map[int]schema
	subjects map[string][]schema // versions in order
	nextID   int
	user     string
	password string

	status   atomic.Int32 // when not 0, every request is answered with it
	delay    atomic.Int64 // nanoseconds every answer waits
	requests atomic.Int64
	idGets   sync.Map // id → *atomic.Int64
}

// New starts a registry; it stops when the test's Cleanup runs close.
func New() *Registry {
	r := &Registry{byID: map[int]schema{}, subjects: map[string][]schema{}, nextID: 1}
	r.srv = httptest.NewServer(http.HandlerFunc(r.serve))
	return r
}

// NewTLS starts a registry that serves https with httptest's certificate (see Server).
func NewTLS() *Registry {
	r := &Registry{byID: map[int]schema{}, subjects: map[string][]schema{}, nextID: 1}
	r.srv = httptest.NewTLSServer(http.HandlerFunc(r.serve))
	return r
}

// Server returns the HTTP test server (its Client trusts its certificate).
func (r *Registry) Server() *httptest.Server { return r.srv }

// URL returns the registry's base URL.
func (r *Registry) URL() string { return r.srv.URL }

// Close stops the registry.
func (r *Registry) Close() { r.srv.Close() }

// RequireAuth makes every request need HTTP basic auth with user and password (401 otherwise).
func (r *Registry) RequireAuth(user, password string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.user, r.password = user, password
}

// Register adds a new version of subject and returns its id. schemaType is "" (Avro), "AVRO" or
// "PROTOBUF".
func (r *Registry) Register(subject, schemaType, text string, refs ...Reference) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	s := schema{ID: r.nextID, Subject: subject, Version: len(r.subjects[subject]) + 1, Schema: text, SchemaType: schemaType, References: refs}
	r.nextID++
	r.byID[s.ID] = s
	r.subjects[subject] = append(r.subjects[subject], s)
	return s.ID
}

// Fail makes every request answer status (such as 503) until Fail(0).
func (r *Registry) Fail(status int) { r.status.Store(int32(status)) }

// Delay makes every answer wait d (0: none), to provoke client timeouts.
func (r *Registry) Delay(d time.Duration) { r.delay.Store(int64(d)) }

// Requests returns the number of requests served so far.
func (r *Registry) Requests() int64 { return r.requests.Load() }

// IDRequests returns the number of GET /schemas/ids/{id} requests for id answered 200.
func (r *Registry) IDRequests(id int) int64 {
	if c, ok := r.idGets.Load(id); ok {
		return c.(*atomic.Int64).Load()
	}
	return 0
}

func (r *Registry) serve(w http.ResponseWriter, req *http.Request) {
	r.requests.Add(1)
	if d := time.Duration(r.delay.Load()); d > 0 {
		select {
		case <-time.After(d):
		case <-req.Context().Done():
			return
		}
	}
	if st := int(r.status.Load()); st != 0 {
		writeError(w, st, st*100, "fault injected")
		return
	}
	r.mu.Lock()
	user, password := r.user, r.password
	r.mu.Unlock()
	if u, p, ok := req.BasicAuth(); user != "" && (!ok || u != user || p != password) {
		writeError(w, http.StatusUnauthorized, 40101, "Unauthorized")
		return
	}
	if req.Method != http.MethodGet {
		writeError(w, http.StatusMethodNotAllowed, 405, "method not allowed")
		return
	}
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	switch {
	case len(parts) == 3 && parts[0] == "schemas" && parts[1] == "ids":
		r.serveID(w, parts[2])
	case len(parts) == 4 && parts[0] == "subjects" && parts[2] == "versions":
		r.serveVersion(w, parts[1], parts[3])
	case len(parts) == 1 && parts[0] == "subjects":
		r.mu.Lock()
		var subs []string
		for s := range r.subjects {
			subs = append(subs, s)
		}
		r.mu.Unlock()
		slices.Sort(subs)
		writeJSON(w, append([]string{}, subs...))
	default:
		writeError(w, http.StatusNotFound, 404, "not found")
	}
}

func (r *Registry) serveID(w http.ResponseWriter, idText string) {
	id, err := strconv.Atoi(idText)
	r.mu.Lock()
	s, ok := r.byID[id]
	r.mu.Unlock()
	if err != nil || !ok {
		writeError(w, http.StatusNotFound, 40403, "Schema "+idText+" not found")
		return
	}
	c, _ := r.idGets.LoadOrStore(id, new(atomic.Int64))
	c.(*atomic.Int64).Add(1)
	writeJSON(w, schema{Schema: s.Schema, SchemaType: s.SchemaType, References: s.References})
}

func (r *Registry) serveVersion(w http.ResponseWriter, subject, version string) {
	r.mu.Lock()
	vs := r.subjects[subject]
	r.mu.Unlock()
	if len(vs) == 0 {
		writeError(w, http.StatusNotFound, 40401, "Subject '"+subject+"' not found.")
		return
	}
	v, err := strconv.Atoi(version)
	if version == "latest" {
		v, err = len(vs), nil
	}
	if err != nil || v < 1 || v > len(vs) {
		writeError(w, http.StatusNotFound, 40402, "Version "+version+" not found.")
		return
	}
	writeJSON(w, vs[v-1])
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	_ = json.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status, code int, msg string) {
	w.Header().Set("Content-Type", "application/vnd.schemaregistry.v1+json")
	w.WriteHeader(status)
	fmt.Fprintf(w, `{"error_code":%d,"message":%q}`, code, msg)
}
