// Package s3test provides S3-compatible servers for tests: Fake, a small
// in-process server (httptest) with fault injection, and StartMoto, which
// runs a separate moto_server process. Both speak path-style S3 over plain
// HTTP on 127.0.0.1 and accept any credentials.
//
// StartMoto reads KDEDUP_REQUIRE_MOTO: when it is "1" (as in CI) a missing
// moto_server fails the test instead of skipping it.
package s3test

import (
	"bytes"
	"crypto/md5"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"encoding/xml"
	"fmt"
	"hash/crc32"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Op names one S3 operation the Fake serves.
type Op string

// The operations the Fake serves.
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
	// Status, when not 0, answers with this HTTP status and an S3 error
	// document (code Code, default "InternalError") instead of serving the
	// request. A request body is read (and dropped) first.
	Status int
	Code   string
	// Delay holds the request this long (or until the client gives up)
	// before it is served or failed.
	Delay time.Duration
	// Truncate, for GetObject, announces the object's full length but sends
	// only this many bytes, then drops the connection.
	Truncate int64
	// Times is the number of requests the fault applies to; 0 means every
	// request until Clear.
	Times int
}

type object struct {
	data     []byte
	etag     string
	modified time.Time
}

type multipart struct {
	bucket, key string
	initiated   time.Time
	parts       map[int32]object
}

// Fake is an in-process S3 server. Create it with NewFake and Close it when
// done. Its methods are safe for concurrent use.
type Fake struct {
	srv *httptest.Server

	mu       sync.Mutex
	buckets  map[string]map[string]object // bucket → key → object
	uploads  map[string]*multipart        // upload ID → upload
	faults   map[Op][]*Fault
	counts   map[Op]int
	active   map[Op]int
	peak     map[Op]int
	nextID   int
	now      func() time.Time
	pageSize int
}

// NewFake starts a Fake on 127.0.0.1 with no buckets.
func NewFake() *Fake {
	f := &Fake{
		buckets: map[string]map[string]object{}, uploads: map[string]*multipart{},
		faults: map[Op][]*Fault{}, counts: map[Op]int{},
		active: map[Op]int{}, peak: map[Op]int{}, now: time.Now, pageSize: 1000,
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
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.buckets[name] == nil {
		f.buckets[name] = map[string]object{}
	}
}

// SetClock makes the Fake date objects and uploads with now.
func (f *Fake) SetClock(now func() time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.now = now
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
	fc := fault
	f.faults[op] = append(f.faults[op], &fc)
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

// PeakConcurrent returns the largest number of requests of op the Fake was
// serving at the same time.
func (f *Fake) PeakConcurrent(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.peak[op]
}

// Keys returns the bucket's object keys, sorted.
func (f *Fake) Keys(bucket string) []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var keys []string
	for k := range f.buckets[bucket] {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}

// Object returns an object's bytes.
func (f *Fake) Object(bucket, key string) ([]byte, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	o, ok := f.buckets[bucket][key]
	return o.data, ok
}

// PendingUploads returns the number of multipart uploads neither completed
// nor aborted.
func (f *Fake) PendingUploads() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.uploads)
}

// takeFault counts a request of op (the caller decrements active when done) and returns the fault to apply, if any.
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

// classify maps a path-style request to its operation, bucket and key.
func classify(r *http.Request) (op Op, bucket, key string) {
	path := strings.TrimPrefix(r.URL.Path, "/")
	bucket, key, _ = strings.Cut(path, "/")
	q := r.URL.Query()
	switch {
	case key == "" && r.Method == http.MethodPut:
		return CreateBucket, bucket, ""
	case key == "" && r.Method == http.MethodHead:
		return HeadBucket, bucket, ""
	case key == "" && r.Method == http.MethodGet && q.Has("uploads"):
		return ListMultipartUploads, bucket, ""
	case key == "" && r.Method == http.MethodGet:
		return ListObjectsV2, bucket, ""
	case r.Method == http.MethodPut && q.Has("uploadId"):
		return UploadPart, bucket, key
	case r.Method == http.MethodPut:
		return PutObject, bucket, key
	case r.Method == http.MethodPost && q.Has("uploads"):
		return CreateMultipartUpload, bucket, key
	case r.Method == http.MethodPost && q.Has("uploadId"):
		return CompleteMultipartUpload, bucket, key
	case r.Method == http.MethodDelete && q.Has("uploadId"):
		return AbortMultipartUpload, bucket, key
	case r.Method == http.MethodDelete:
		return DeleteObject, bucket, key
	case r.Method == http.MethodHead:
		return HeadObject, bucket, key
	case r.Method == http.MethodGet:
		return GetObject, bucket, key
	}
	return "", bucket, key
}

func (f *Fake) serve(w http.ResponseWriter, r *http.Request) {
	op, bucket, key := classify(r)
	if op == "" {
		writeError(w, http.StatusNotImplemented, "NotImplemented", r.Method+" "+r.URL.Path)
		return
	}
	if strings.Contains(r.Header.Get("Content-Encoding"), "aws-chunked") {
		writeError(w, http.StatusNotImplemented, "NotImplemented", "aws-chunked bodies are not supported by the fake")
		return
	}
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
		code := fault.Code
		if code == "" {
			code = "InternalError"
		}
		writeError(w, fault.Status, code, "injected fault")
		return
	}
	truncate := int64(-1)
	if fault != nil && fault.Truncate > 0 {
		truncate = fault.Truncate
	}
	f.handle(w, r, op, bucket, key, truncate)
}

func (f *Fake) handle(w http.ResponseWriter, r *http.Request, op Op, bucket, key string, truncate int64) {
	if op == CreateBucket {
		f.CreateBucket(bucket)
		return
	}
	f.mu.Lock()
	_, exists := f.buckets[bucket]
	f.mu.Unlock()
	if !exists {
		writeError(w, http.StatusNotFound, "NoSuchBucket", bucket)
		return
	}
	switch op {
	case HeadBucket:
	case PutObject:
		f.putObject(w, r, bucket, key)
	case GetObject, HeadObject:
		f.getObject(w, r, bucket, key, truncate)
	case DeleteObject:
		f.mu.Lock()
		delete(f.buckets[bucket], key)
		f.mu.Unlock()
		w.WriteHeader(http.StatusNoContent)
	case ListObjectsV2:
		f.listObjects(w, r, bucket)
	case CreateMultipartUpload:
		f.createUpload(w, bucket, key)
	case UploadPart:
		f.uploadPart(w, r)
	case CompleteMultipartUpload:
		f.completeUpload(w, r, bucket, key)
	case AbortMultipartUpload:
		f.mu.Lock()
		_, ok := f.uploads[r.URL.Query().Get("uploadId")]
		delete(f.uploads, r.URL.Query().Get("uploadId"))
		f.mu.Unlock()
		if !ok {
			writeError(w, http.StatusNotFound, "NoSuchUpload", "no such upload")
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case ListMultipartUploads:
		f.listUploads(w, r, bucket)
	}
}

// readBody reads a request body and checks the CRC32 checksum header if
// the client sent one.
func readBody(w http.ResponseWriter, r *http.Request) ([]byte, bool) {
	buf := bytes.NewBuffer(make([]byte, 0, max(r.ContentLength, 0)+1))
	_, err := buf.ReadFrom(r.Body)
	data := buf.Bytes()
	if err != nil {
		writeError(w, http.StatusBadRequest, "IncompleteBody", err.Error())
		return nil, false
	}
	if want := r.Header.Get("X-Amz-Checksum-Crc32"); want != "" {
		var sum [4]byte
		binary.BigEndian.PutUint32(sum[:], crc32.ChecksumIEEE(data))
		if got := base64.StdEncoding.EncodeToString(sum[:]); got != want {
			writeError(w, http.StatusBadRequest, "BadDigest", "CRC32 mismatch")
			return nil, false
		}
		w.Header().Set("X-Amz-Checksum-Crc32", want)
	}
	return data, true
}

func etag(data []byte) string {
	sum := md5.Sum(data)
	return `"` + hex.EncodeToString(sum[:]) + `"`
}

func (f *Fake) putObject(w http.ResponseWriter, r *http.Request, bucket, key string) {
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	f.mu.Lock()
	o := object{data: data, etag: etag(data), modified: f.now()}
	f.buckets[bucket][key] = o
	f.mu.Unlock()
	w.Header().Set("ETag", o.etag)
}

func (f *Fake) getObject(w http.ResponseWriter, r *http.Request, bucket, key string, truncate int64) {
	f.mu.Lock()
	o, ok := f.buckets[bucket][key]
	f.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NoSuchKey", key)
		return
	}
	w.Header().Set("Content-Length", strconv.Itoa(len(o.data)))
	w.Header().Set("ETag", o.etag)
	w.Header().Set("Last-Modified", o.modified.UTC().Format(http.TimeFormat))
	if r.Method == http.MethodHead {
		return
	}
	if truncate >= 0 && truncate < int64(len(o.data)) {
		_, _ = w.Write(o.data[:truncate])
		if fl, ok := w.(http.Flusher); ok {
			fl.Flush()
		}
		panic(http.ErrAbortHandler) // drop the connection mid-body
	}
	_, _ = w.Write(o.data)
}

type listResult struct {
	XMLName               xml.Name      `xml:"ListBucketResult"`
	Name                  string        `xml:"Name"`
	Prefix                string        `xml:"Prefix"`
	KeyCount              int           `xml:"KeyCount"`
	MaxKeys               int           `xml:"MaxKeys"`
	IsTruncated           bool          `xml:"IsTruncated"`
	NextContinuationToken string        `xml:"NextContinuationToken,omitempty"`
	Contents              []listContent `xml:"Contents"`
}

type listContent struct {
	Key          string `xml:"Key"`
	LastModified string `xml:"LastModified"`
	ETag         string `xml:"ETag"`
	Size         int    `xml:"Size"`
}

func (f *Fake) listObjects(w http.ResponseWriter, r *http.Request, bucket string) {
	q := r.URL.Query()
	prefix, after := q.Get("prefix"), q.Get("continuation-token")
	maxKeys := 1000
	if mk, err := strconv.Atoi(q.Get("max-keys")); err == nil && mk >= 0 {
		maxKeys = mk
	}
	f.mu.Lock()
	maxKeys = min(maxKeys, f.pageSize)
	var keys []string
	for k := range f.buckets[bucket] {
		if strings.HasPrefix(k, prefix) && k > after {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	res := listResult{Name: bucket, Prefix: prefix, MaxKeys: maxKeys}
	for i, k := range keys {
		if i == maxKeys {
			res.IsTruncated, res.NextContinuationToken = true, keys[i-1]
			break
		}
		o := f.buckets[bucket][k]
		res.Contents = append(res.Contents, listContent{Key: k, LastModified: o.modified.UTC().Format(time.RFC3339Nano),
			ETag: o.etag, Size: len(o.data)})
	}
	f.mu.Unlock()
	res.KeyCount = len(res.Contents)
	writeXML(w, res)
}

func (f *Fake) createUpload(w http.ResponseWriter, bucket, key string) {
	f.mu.Lock()
	f.nextID++
	id := fmt.Sprintf("upload-%d", f.nextID)
	f.uploads[id] = &multipart{bucket: bucket, key: key, initiated: f.now(), parts: map[int32]object{}}
	f.mu.Unlock()
	writeXML(w, struct {
		XMLName  xml.Name `xml:"InitiateMultipartUploadResult"`
		Bucket   string   `xml:"Bucket"`
		Key      string   `xml:"Key"`
		UploadID string   `xml:"UploadId"`
	}{Bucket: bucket, Key: key, UploadID: id})
}

func (f *Fake) uploadPart(w http.ResponseWriter, r *http.Request) {
	num, err := strconv.Atoi(r.URL.Query().Get("partNumber"))
	if err != nil || num < 1 || num > 10000 {
		writeError(w, http.StatusBadRequest, "InvalidArgument", "bad part number")
		return
	}
	data, ok := readBody(w, r)
	if !ok {
		return
	}
	part := object{data: data, etag: etag(data)}
	f.mu.Lock()
	u, ok := f.uploads[r.URL.Query().Get("uploadId")]
	if ok {
		u.parts[int32(num)] = part
	}
	f.mu.Unlock()
	if !ok {
		writeError(w, http.StatusNotFound, "NoSuchUpload", "no such upload")
		return
	}
	w.Header().Set("ETag", part.etag)
}

func (f *Fake) completeUpload(w http.ResponseWriter, r *http.Request, bucket, key string) {
	var req struct {
		Parts []struct {
			PartNumber int32  `xml:"PartNumber"`
			ETag       string `xml:"ETag"`
		} `xml:"Part"`
	}
	if err := xml.NewDecoder(r.Body).Decode(&req); err != nil {
		writeError(w, http.StatusBadRequest, "MalformedXML", err.Error())
		return
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	id := r.URL.Query().Get("uploadId")
	u, ok := f.uploads[id]
	if !ok || u.bucket != bucket || u.key != key {
		writeError(w, http.StatusNotFound, "NoSuchUpload", "no such upload")
		return
	}
	total := 0
	for _, p := range u.parts {
		total += len(p.data)
	}
	all := bytes.NewBuffer(make([]byte, 0, total))
	for i, p := range req.Parts {
		part, ok := u.parts[p.PartNumber]
		if !ok || part.etag != p.ETag || (i > 0 && p.PartNumber <= req.Parts[i-1].PartNumber) {
			writeError(w, http.StatusBadRequest, "InvalidPart", fmt.Sprintf("part %d", p.PartNumber))
			return
		}
		all.Write(part.data)
	}
	delete(f.uploads, id)
	// Like S3: the ETag of a multipart object is the MD5 of the parts' MD5s, a dash and the count.
	var sums []byte
	for _, p := range req.Parts {
		sum, _ := hex.DecodeString(strings.Trim(p.ETag, `"`))
		sums = append(sums, sum...)
	}
	o := object{data: all.Bytes(), etag: strings.TrimSuffix(etag(sums), `"`) + fmt.Sprintf(`-%d"`, len(req.Parts)), modified: f.now()}
	f.buckets[bucket][key] = o
	writeXML(w, struct {
		XMLName xml.Name `xml:"CompleteMultipartUploadResult"`
		Bucket  string   `xml:"Bucket"`
		Key     string   `xml:"Key"`
		ETag    string   `xml:"ETag"`
	}{Bucket: bucket, Key: key, ETag: o.etag})
}

func (f *Fake) listUploads(w http.ResponseWriter, r *http.Request, bucket string) {
	type upload struct {
		Key       string `xml:"Key"`
		UploadID  string `xml:"UploadId"`
		Initiated string `xml:"Initiated"`
	}
	prefix := r.URL.Query().Get("prefix")
	res := struct {
		XMLName     xml.Name `xml:"ListMultipartUploadsResult"`
		Bucket      string   `xml:"Bucket"`
		IsTruncated bool     `xml:"IsTruncated"`
		Uploads     []upload `xml:"Upload"`
	}{Bucket: bucket}
	f.mu.Lock()
	for id, u := range f.uploads {
		if u.bucket == bucket && strings.HasPrefix(u.key, prefix) {
			res.Uploads = append(res.Uploads, upload{Key: u.key, UploadID: id, Initiated: u.initiated.UTC().Format(time.RFC3339Nano)})
		}
	}
	f.mu.Unlock()
	slices.SortFunc(res.Uploads, func(a, b upload) int { return strings.Compare(a.Key+a.UploadID, b.Key+b.UploadID) })
	writeXML(w, res)
}

func writeXML(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/xml")
	_, _ = io.WriteString(w, xml.Header)
	_ = xml.NewEncoder(w).Encode(v)
}

func writeError(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/xml")
	w.WriteHeader(status)
	_ = xml.NewEncoder(w).Encode(struct {
		XMLName xml.Name `xml:"Error"`
		Code    string   `xml:"Code"`
		Message string   `xml:"Message"`
	}{Code: code, Message: msg})
}
