// Package s3test provides S3-compatible servers for tests: Fake, gofakes3's in-process server
// (httptest) behind a fault-injection handler, and StartMoto, which runs a separate moto_server
// process. Both speak path-style S3 over plain HTTP on 127.0.0.1 and accept any credentials.
//
// StartMoto reads KDEDUP_REQUIRE_MOTO: when it is "1" (as in CI) a missing moto_server fails the
// test instead of skipping it.
package s3test

import (
	"bytes"
	"cmp"
	"encoding/xml"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/johannesboyne/gofakes3"
	"github.com/johannesboyne/gofakes3/backend/s3mem"
)

// Op names one S3 operation, as the Fake classifies requests for its faults and counters.
type Op string

// The operations the Fake tells apart.
const (
	CreateBucket            Op = "CreateBucket"
	HeadBucket              Op = "HeadBucket"
	PutObject               Op = "PutObject"
	GetObject               Op = "GetObject"
	HeadObject              Op = "HeadObject"
	DeleteObject            Op = "DeleteObject"
	ListObjectsV2           Op = "ListObjectsV2"
	CreateMultipartUpload   Op = "CreateMultipartUpload"
	UploadPart              Op = "UploadPart"
	CompleteMultipartUpload Op = "CompleteMultipartUpload"
	AbortMultipartUpload    Op = "AbortMultipartUpload"
	ListMultipartUploads    Op = "ListMultipartUploads"
)

// Fault changes how the Fake answers requests of one operation.
type Fault struct {
	// Status, when not 0, answers with this HTTP status and an S3 error document (code Code,
	// default "InternalError") instead of serving the request. A request body is read (and
	// dropped) first.
	Status int
	Code   string
	// Delay holds the request this long (or until the client gives up) before it is served or
	// failed.
	Delay time.Duration
	// Truncate, for GetObject, announces the object's full length but sends only this many
	// bytes, then drops the connection.
	Truncate int64
	// Times is the number of requests the fault applies to; 0 means every request until Clear.
	Times int
}

// Fake is an in-process S3 server: github.com/johannesboyne/gofakes3 over its in-memory backend,
// behind a handler that injects faults, counts requests and caps listing pages. Create it with
// NewFake and Close it when done. Its methods are safe for concurrent use.
type Fake struct {
	srv     *httptest.Server
	s3      http.Handler
	backend *s3mem.Backend
	clock   *clock

	mu       sync.Mutex
	faults   map[Op][]*Fault
	counts   map[Op]int
	active   map[Op]int
	peak     map[Op]int
	pageSize int
}

// clock is the Fake's time: the wall clock moved by an offset (SetClock).
type clock struct {
	mu  sync.Mutex
	now func() time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now().UTC()
}

func (c *clock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

// NewFake starts a Fake on 127.0.0.1 with no buckets.
func NewFake() *Fake {
	c := &clock{now: time.Now}
	backend := s3mem.New(s3mem.WithTimeSource(c))
	// No time-skew check: SetClock may date uploads hours back while the client signs with the
	// wall clock.
	faker := gofakes3.New(backend, gofakes3.WithTimeSource(c), gofakes3.WithTimeSkewLimit(0))
	f := &Fake{
		s3: faker.Server(), backend: backend, clock: c,
		faults: map[Op][]*Fault{}, counts: map[Op]int{}, active: map[Op]int{}, peak: map[Op]int{}, pageSize: 1000,
	}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	return f
}

// Endpoint returns the base URL of the server, for S3Options.Endpoint.
func (f *Fake) Endpoint() string { return f.srv.URL }

// Close stops the server.
func (f *Fake) Close() { f.srv.Close() }

// CreateBucket creates an empty bucket (no-op if it exists).
func (f *Fake) CreateBucket(name string) {
	if ok, _ := f.backend.BucketExists(name); !ok {
		_ = f.backend.CreateBucket(name)
	}
}

// SetClock makes the Fake date objects and uploads with now.
func (f *Fake) SetClock(now func() time.Time) {
	f.clock.mu.Lock()
	defer f.clock.mu.Unlock()
	f.clock.now = now
}

// SetPageSize caps the keys of one ListObjectsV2 page (default 1000).
func (f *Fake) SetPageSize(n int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pageSize = n
}

// Inject adds a fault for op; faults of one op apply in the order added.
func (f *Fake) Inject(op Op, fault Fault) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults[op] = append(f.faults[op], &fault)
}

// Clear removes every fault.
func (f *Fake) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.faults = map[Op][]*Fault{}
}

// Count returns how many requests of op the Fake received.
func (f *Fake) Count(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.counts[op]
}

// PeakConcurrent returns the largest number of requests of op the Fake was serving at the same
// time.
func (f *Fake) PeakConcurrent(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak[op]
}

// Keys returns the bucket's object keys, sorted.
func (f *Fake) Keys(bucket string) []string {
	list, err := f.backend.ListBucket(bucket, nil, gofakes3.ListBucketPage{})
	if err != nil {
		return nil
	}
	var keys []string
	for _, c := range list.Contents {
		keys = append(keys, c.Key)
	}
	slices.Sort(keys)
	return keys
}

// PendingUploads returns the number of multipart uploads, in every bucket, neither completed nor
// aborted.
func (f *Fake) PendingUploads() int {
	buckets, _ := f.backend.ListBuckets()
	n := 0
	for _, b := range buckets {
		rec := httptest.NewRecorder()
		f.listUploads(rec, httptest.NewRequest(http.MethodGet, "/"+b.Name+"?uploads", nil))
		var res gofakes3.ListMultipartUploadsResult
		if err := xml.Unmarshal(rec.Body.Bytes(), &res); err != nil {
			panic(fmt.Sprintf("s3test: listing the uploads of %s: HTTP %d: %v", b.Name, rec.Code, err))
		}
		n += len(res.Uploads)
	}
	return n
}

// takeFault counts a request of op (the caller decrements active when done) and returns the
// fault to apply, if any.
func (f *Fake) takeFault(op Op) *Fault {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.counts[op]++
	f.active[op]++
	f.peak[op] = max(f.peak[op], f.active[op])
	fs := f.faults[op]
	if len(fs) == 0 {
		return nil
	}
	fc := *fs[0]
	if fs[0].Times > 0 {
		if fs[0].Times--; fs[0].Times == 0 {
			f.faults[op] = fs[1:]
		}
	}
	return &fc
}

// classify maps a path-style request to its operation.
func classify(r *http.Request) Op {
	_, key, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	q := r.URL.Query()
	switch {
	case key == "" && r.Method == http.MethodPut:
		return CreateBucket
	case key == "" && r.Method == http.MethodHead:
		return HeadBucket
	case key == "" && r.Method == http.MethodGet && q.Has("uploads"):
		return ListMultipartUploads
	case key == "" && r.Method == http.MethodGet:
		return ListObjectsV2
	case r.Method == http.MethodPut && q.Has("uploadId"):
		return UploadPart
	case r.Method == http.MethodPut:
		return PutObject
	case r.Method == http.MethodPost && q.Has("uploads"):
		return CreateMultipartUpload
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return CompleteMultipartUpload
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return AbortMultipartUpload
	case r.Method == http.MethodDelete:
		return DeleteObject
	case r.Method == http.MethodHead:
		return HeadObject
	}
	return GetObject
}

// serve applies the faults of the request's operation, then lets gofakes3 answer it.
func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	op := classify(r)
	fault := f.takeFault(op)
	defer func() {
		f.mu.Lock()
		f.active[op]--
		f.mu.Unlock()
	}()
	if fault != nil && fault.Delay > 0 {
		// Read the body first: only then does the server notice a client that gives up.
		body, err := io.ReadAll(r.Body)
		if err != nil {
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		select {
		case <-time.After(fault.Delay):
		case <-r.Context().Done():
			return
		}
	}
	if fault != nil && fault.Status != 0 {
		_, _ = io.Copy(io.Discard, r.Body)
		writeError(w, fault.Status, cmp.Or(fault.Code, "InternalError"))
		return
	}
	switch op {
	case ListObjectsV2:
		f.capPage(r)
	case ListMultipartUploads:
		f.listUploads(w, r)
		return
	}
	if fault != nil && fault.Truncate > 0 {
		w = &truncatingWriter{ResponseWriter: w, left: fault.Truncate}
	}
	f.s3.ServeHTTP(w, r)
}

// listUploads serves ListMultipartUploads. gofakes3 answers NoSuchUpload for a bucket that never
// had a multipart upload, where S3 returns an empty list: the list is made empty here.
func (f *Fake) listUploads(w http.ResponseWriter, r *http.Request) {
	rec := httptest.NewRecorder()
	f.s3.ServeHTTP(rec, r)
	if rec.Code == http.StatusNotFound && strings.Contains(rec.Body.String(), "NoSuchUpload") {
		bucket, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		w.Header().Set("Content-Type", "application/xml")
		_ = xml.NewEncoder(w).Encode(gofakes3.ListMultipartUploadsResult{Bucket: bucket, Prefix: r.URL.Query().Get("prefix")})
		return
	}
	maps.Copy(w.Header(), rec.Header())
	w.WriteHeader(rec.Code)
	_, _ = w.Write(rec.Body.Bytes())
}

// capPage lowers the max-keys of a listing to the page size.
func (f *Fake) capPage(r *http.Request) {
	f.mu.Lock()
	size := f.pageSize
	f.mu.Unlock()
	q := r.URL.Query()
	if n, err := strconv.Atoi(q.Get("max-keys")); err == nil && n <= size {
		return
	}
	q.Set("max-keys", strconv.Itoa(size))
	r.URL.RawQuery = q.Encode()
}

// truncatingWriter passes a response through until left body bytes were written, then drops the
// connection, as a transfer that breaks half-way.
type truncatingWriter struct {
	http.ResponseWriter
	left int64
}

func (t *truncatingWriter) Write(p []byte) (int, error) {
	if int64(len(p)) <= t.left {
		t.left -= int64(len(p))
		return t.ResponseWriter.Write(p)
	}
	_, _ = t.ResponseWriter.Write(p[:t.left])
	if fl, ok := t.ResponseWriter.(http.Flusher); ok {
		fl.Flush()
	}
	panic(http.ErrAbortHandler) // drop the connection mid-body
}

func writeError(w http.ResponseWriter, status int, code string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string   `xml:"Code"`
		Message string   `xml:"Message"`
	}{Code: code, Message: "injected fault"})
}
