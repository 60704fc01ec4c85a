package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kdedup/kdedup/checkpoint/s3test"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

func TestParseURL(t *testing.T) {
	tests := []struct {
		raw     string
		want    Location
		wantErr string // substring of the error; "" means valid
	}{
		{"file:///var/lib/kdedup", Location{Scheme: SchemeFile, Dir: "/var/lib/kdedup"}, ""},
		{"file:///var/lib/kdedup/", Location{Scheme: SchemeFile, Dir: "/var/lib/kdedup"}, ""},
		{"file://localhost/x/../y", Location{Scheme: SchemeFile, Dir: "/y"}, ""},
		{"FILE:///a", Location{Scheme: SchemeFile, Dir: "/a"}, ""},
		{"s3://my-bucket", Location{Scheme: SchemeS3, Bucket: "my-bucket"}, ""},
		{"s3://my-bucket/", Location{Scheme: SchemeS3, Bucket: "my-bucket"}, ""},
		{"s3://my.bucket/kdedup/prod", Location{Scheme: SchemeS3, Bucket: "my.bucket", Prefix: "kdedup/prod/"}, ""},
		{"s3://b_1/p/", Location{Scheme: SchemeS3, Bucket: "b_1", Prefix: "p/"}, ""},
		{"", Location{}, "empty URL"},
		{"/var/lib/kdedup", Location{}, "has no scheme"},
		{"file:relative", Location{}, "has no scheme"},
		{"file://host/dir", Location{}, "remote hosts"},
		{"file://", Location{}, "absolute path"},
		{"s3://", Location{}, "3 to 63"},
		{"s3://ab", Location{}, "3 to 63"},
		{"s3://-bucket", Location{}, "start and end"},
		{"s3://bu*ket/x", Location{}, "contains '*'"},
		{"s3://bucket/%zz", Location{}, "does not parse"},
		{"s3://bucket/a//b", Location{}, "empty segments"},
		{"s3://AKID:hunter2@bucket/p", Location{}, "must not contain credentials"},
		{"s3://bucket/p?X-Amz-Signature=hunter2", Location{}, "query strings"},
		{"s3://bucket/p#frag", Location{}, "fragments"},
		{"gs://bucket/p", Location{}, `scheme "gs"`},
		{"http://bucket/p", Location{}, `scheme "http"`},
	}
	for _, tc := range tests {
		t.Run(tc.raw, func(t *testing.T) {
			got, err := ParseURL(tc.raw)
			if tc.wantErr == "" {
				if err != nil || got != tc.want {
					t.Fatalf("ParseURL = %+v, %v; want %+v", got, err, tc.want)
				}
				if again, err := ParseURL(got.String()); err != nil || again != got {
					t.Fatalf("String() = %q does not parse back: %+v, %v", got.String(), again, err)
				}
				return
			}
			if err == nil || !errors.Is(err, ErrBadURL) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("ParseURL = %v, want an ErrBadURL containing %q", err, tc.wantErr)
			}
			if strings.Contains(err.Error(), "hunter2") {
				t.Fatalf("error %q repeats a secret", err)
			}
		})
	}
}

// TestOpen: ParseURL then OpenLocation, as internal/app opens CHECKPOINT_URL.
func TestOpen(t *testing.T) {
	ctx := context.Background()
	Open := func(ctx context.Context, raw string, opts Options) (*Store, error) {
		loc, err := ParseURL(raw)
		if err != nil {
			return nil, err
		}
		return OpenLocation(ctx, loc, opts)
	}
	dir := t.TempDir() + "/a/b"
	s, err := Open(ctx, "file://"+dir, Options{Keep: 2})
	if _, ok := s.b.(*DirBackend); err != nil || !ok || s.String() != "file://"+dir || s.Keep() != 2 {
		t.Fatalf("Open(file) = %v %v", s, err)
	}
	if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
		t.Fatalf("Open(file) did not create the directory: %v", err)
	}
	s, err = Open(ctx, "s3://bucket/pre", Options{S3: S3Options{Endpoint: "http://127.0.0.1:1", Region: "eu-west-1"}})
	if _, ok := s.b.(*S3Backend); err != nil || !ok || s.String() != "s3://bucket/pre/" || s.Keep() != DefaultKeep {
		t.Fatalf("Open(s3) = %v %v", s, err)
	}
	bad := []struct {
		url     string
		opts    S3Options
		wantErr string
	}{
		{"s3://bucket/p", S3Options{Endpoint: "minio:9000"}, "http:// or https://"},
		{"s3://bucket/p", S3Options{Endpoint: "http://user:hunter2@minio:9000"}, "must not contain credentials"},
		{"s3://bucket/p", S3Options{Endpoint: "http://minio:9000/?a=b"}, "query"},
		{"s3://bucket/p", S3Options{PartSize: 1 << 20}, "part size"},
		{"s3://bucket/p", S3Options{AccessKeyID: "AKID"}, "both"},
		{"ftp://x/y", S3Options{}, "not supported"},
	}
	for _, tc := range bad {
		_, err := Open(ctx, tc.url, Options{S3: tc.opts})
		if err == nil || !strings.Contains(err.Error(), tc.wantErr) || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("Open(%s, %+v) = %v, want an error containing %q", tc.url, tc.opts, err, tc.wantErr)
		}
	}
	file := t.TempDir() + "/file"
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(ctx, "file://"+file+"/sub", Options{}); err == nil || !strings.Contains(err.Error(), "file://") {
		t.Errorf("Open under a regular file = %v, want an error naming the URL", err)
	}
}

// fakeStore returns a Store over an S3Backend with 64 KiB parts on a fresh Fake holding bucket
// "snaps", under prefix "kdedup/".
func fakeStore(t *testing.T, keep int) (*Store, *S3Backend, *s3test.Fake) {
	t.Helper()
	fake := s3test.NewFake()
	t.Cleanup(fake.Close)
	fake.CreateBucket("snaps")
	b := newTestS3Backend(t, fake.Endpoint(), "s3://snaps/kdedup/", 64<<10)
	return NewStore(b, keep), b, fake
}

// checkErrText checks that a store error names the location and holds no
// credential.
func checkErrText(t *testing.T, err error) {
	t.Helper()
	opts := testS3Options("")
	msg := err.Error()
	if !strings.Contains(msg, "s3://snaps/kdedup/") {
		t.Errorf("error %q does not name the store URL", msg)
	}
	if strings.Contains(msg, opts.SecretAccessKey) || strings.Contains(msg, opts.AccessKeyID) {
		t.Errorf("error %q leaks a credential", msg)
	}
}

func TestS3Faults(t *testing.T) {
	const small, large = 1000, 300 << 10 // one PUT; five 64 KiB parts
	type fault struct {
		op s3test.Op
		f  s3test.Fault
	}
	tests := []struct {
		name    string
		faults  []fault
		size    int
		timeout time.Duration
		ok      bool   // the save succeeds despite the faults
		wantErr string // substring of the error
		wantIs  error
		pending int // multipart uploads left behind
	}{
		{name: "part upload fails", faults: []fault{{s3test.UploadPart, s3test.Fault{Status: 500}}}, size: large,
			wantErr: "uploading part"},
		{name: "part upload fails once, retried", faults: []fault{{s3test.UploadPart, s3test.Fault{Status: 500, Times: 1}}}, size: large, ok: true},
		{name: "complete fails", faults: []fault{{s3test.CompleteMultipartUpload, s3test.Fault{Status: 500}}}, size: large,
			wantErr: "completing the multipart upload"},
		{name: "create fails", faults: []fault{{s3test.CreateMultipartUpload, s3test.Fault{Status: 403, Code: "AccessDenied"}}}, size: large,
			wantErr: "AccessDenied"},
		{name: "put fails with 503", faults: []fault{{s3test.PutObject, s3test.Fault{Status: 503, Code: "SlowDown"}}}, size: small,
			wantErr: "putting the object"},
		{name: "put throttled once, retried", faults: []fault{{s3test.PutObject, s3test.Fault{Status: 503, Code: "SlowDown", Times: 1}}}, size: small, ok: true},
		{name: "list fails", faults: []fault{{s3test.ListObjectsV2, s3test.Fault{Status: 500}}}, size: small,
			wantErr: "listing"},
		{name: "slow part past the deadline", faults: []fault{{s3test.UploadPart, s3test.Fault{Delay: time.Minute}}}, size: large,
			timeout: 300 * time.Millisecond, wantIs: context.DeadlineExceeded},
		{name: "slow complete past the deadline", faults: []fault{{s3test.CompleteMultipartUpload, s3test.Fault{Delay: time.Minute}}}, size: large,
			timeout: 500 * time.Millisecond, wantIs: context.DeadlineExceeded},
		{name: "slow responses within the deadline", faults: []fault{
			{s3test.UploadPart, s3test.Fault{Delay: 30 * time.Millisecond}},
			{s3test.ListObjectsV2, s3test.Fault{Delay: 30 * time.Millisecond}},
		}, size: large, timeout: time.Minute, ok: true},
		{name: "complete and abort fail", faults: []fault{
			{s3test.CompleteMultipartUpload, s3test.Fault{Status: 500}},
			{s3test.AbortMultipartUpload, s3test.Fault{Status: 500}},
		}, size: large, wantErr: "aborting the multipart upload failed", pending: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, fake := fakeStore(t, 3)
			ctx := context.Background()
			prev, err := s.Save(ctx, "u", writeString("previous"))
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range tc.faults {
				fake.Inject(f.op, f.f)
			}
			sctx := ctx
			if tc.timeout > 0 {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, tc.timeout)
				defer cancel()
			}
			data := strings.Repeat("x", tc.size)
			info, err := s.Save(sctx, "u", writeString(data))
			fake.Clear()
			if tc.ok {
				if err != nil {
					t.Fatalf("Save = %v, want success", err)
				}
				if got := readAll(t, s, info); got != data {
					t.Fatalf("saved object holds %d bytes, want %d", len(got), len(data))
				}
				if n := fake.PendingUploads(); n != 0 {
					t.Fatalf("%d multipart uploads left", n)
				}
				return
			}
			if err == nil {
				t.Fatal("Save succeeded despite the faults")
			}
			checkErrText(t, err)
			if !strings.Contains(err.Error(), tc.wantErr) || (tc.wantIs != nil && !errors.Is(err, tc.wantIs)) {
				t.Fatalf("Save = %v, want %q / %v", err, tc.wantErr, tc.wantIs)
			}
			if n := fake.PendingUploads(); n != tc.pending {
				t.Fatalf("%d multipart uploads left, want %d", n, tc.pending)
			}
			if keys := fake.Keys("snaps"); !slices.Equal(keys, []string{"kdedup/" + prev.Name}) {
				t.Fatalf("bucket holds %v, want only the previous snapshot", keys)
			}
			if tc.pending > 0 { // Prune removes an upload abandoned for longer than StaleTempAge
				s.now = func() time.Time { return time.Now().Add(StaleTempAge + time.Minute) }
				if err := s.Prune(ctx, "u"); err != nil {
					t.Fatal(err)
				}
				if n := fake.PendingUploads(); n != 0 {
					t.Fatalf("after Prune %d multipart uploads left", n)
				}
			}
		})
	}
}

func TestS3LoadFaults(t *testing.T) {
	tests := []struct {
		name    string
		op      s3test.Op
		fault   s3test.Fault
		wantErr string
	}{
		{"download truncated in the data", s3test.GetObject, s3test.Fault{Truncate: 1000, Times: 1}, "download ended after 1000 of"},
		{"download truncated in the header", s3test.GetObject, s3test.Fault{Truncate: 10, Times: 1}, "download ended after 10 of"},
		{"get fails", s3test.GetObject, s3test.Fault{Status: 500}, "open"},
		{"get denied", s3test.GetObject, s3test.Fault{Status: 403, Code: "AccessDenied"}, "AccessDenied"},
		{"list fails", s3test.ListObjectsV2, s3test.Fault{Status: 503, Code: "SlowDown"}, "list"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, _, fake := fakeStore(t, 3)
			ctx := context.Background()
			write, words := encodeSnap(64, 3)
			if _, err := s.Save(ctx, "u", write); err != nil {
				t.Fatal(err)
			}
			fake.Inject(tc.op, tc.fault)
			// A transport failure is not a bad snapshot: Load must stop with an error, neither
			// falling back to an older snapshot nor starting cold.
			_, res, err := Load(ctx, s, "u", consumeWords(testHeader(1).Seed))
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Load = %s, %v; want an error containing %q", res.Outcome, err, tc.wantErr)
			}
			if errors.Is(err, snapshot.ErrCorrupt) || len(res.Failures) != 0 {
				t.Fatalf("Load took a transport failure for a bad snapshot: %v (failures %v)", err, res.Failures)
			}
			checkErrText(t, err)
			fake.Clear()
			got, res, err := Load(ctx, s, "u", consumeWords(testHeader(1).Seed))
			if err != nil || res.Outcome != OutcomeWarm || !slices.Equal(got.words, words) {
				t.Fatalf("Load after the fault = %s, %v", res.Outcome, err)
			}
		})
	}
}

func TestS3PruneFailureIsReported(t *testing.T) {
	s, _, fake := fakeStore(t, 1)
	ctx := context.Background()
	if _, err := s.Save(ctx, "u", writeString("a")); err != nil {
		t.Fatal(err)
	}
	fake.Inject(s3test.DeleteObject, s3test.Fault{Status: 500})
	info, err := s.Save(ctx, "u", writeString("b"))
	if !errors.Is(err, ErrPrune) {
		t.Fatalf("Save = %v, want ErrPrune", err)
	}
	if got := readAll(t, s, info); got != "b" {
		t.Fatalf("snapshot saved despite ErrPrune holds %q", got)
	}
}

func TestS3PruneStaleUploads(t *testing.T) {
	s, b, fake := fakeStore(t, 3)
	ctx := context.Background()
	start := func(key string, age time.Duration) {
		fake.SetClock(func() time.Time { return time.Now().Add(-age) })
		_, err := b.client.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String("snaps"), Key: aws.String(key)})
		if err != nil {
			t.Fatal(err)
		}
	}
	start("kdedup/"+snapName("u", 1), 2*StaleTempAge)    // died while saving: aborted
	start("kdedup/"+snapName("u", 2), time.Minute)       // another replica saving now: kept
	start("kdedup/"+snapName("u.p1", 3), 2*StaleTempAge) // another unit: kept
	start("kdedup/u.notes", 2*StaleTempAge)              // not a snapshot: kept
	if err := s.Prune(ctx, "u"); err != nil {
		t.Fatal(err)
	}
	if n := fake.PendingUploads(); n != 3 {
		t.Fatalf("%d uploads left, want 3", n)
	}
}

func TestS3ListPages(t *testing.T) {
	s, _, fake := fakeStore(t, 5)
	fake.SetPageSize(2)
	ctx := context.Background()
	var saved []Info
	for i := range 7 {
		info, err := s.Save(ctx, "u", writeString(strings.Repeat("y", i)))
		if err != nil {
			t.Fatal(err)
		}
		saved = append(saved, info)
	}
	list, err := s.List(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 5 {
		t.Fatalf("List has %d snapshots, want 5", len(list))
	}
	for i, info := range list {
		if want := saved[6-i]; info.Name != want.Name || info.Size != want.Size {
			t.Errorf("list[%d] = %+v, want %+v", i, info, want)
		}
	}
}

func TestS3Check(t *testing.T) {
	s, _, fake := fakeStore(t, 3)
	ctx := context.Background()
	if err := s.Check(ctx); err != nil {
		t.Fatal(err)
	}
	missing := NewStore(newTestS3Backend(t, fake.Endpoint(), "s3://nosuchbucket/x", 0), 3)
	err := missing.Check(ctx)
	if err == nil || !strings.Contains(err.Error(), "s3://nosuchbucket/x/") || !strings.Contains(err.Error(), "NoSuchBucket") {
		t.Fatalf("Check of a missing bucket = %v", err)
	}
	// A missing bucket is not a pruned snapshot: Open must not say fs.ErrNotExist, or Load
	// would skip every snapshot and start cold.
	_, err = missing.Open(ctx, Info{Unit: "u", Name: snapName("u", 1)})
	if err == nil || errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open in a missing bucket = %v", err)
	}
	down := NewStore(newTestS3Backend(t, "http://127.0.0.1:1", "s3://snaps/kdedup", 0), 3)
	if err := down.Check(ctx); err == nil || !strings.Contains(err.Error(), "s3://snaps/kdedup/") {
		t.Fatalf("Check of an unreachable endpoint = %v", err)
	}
}

// TestS3StoreMemoryBound saves a snapshot much larger than the part buffers
// while the parts upload slowly, and checks that the writer is held back
// (no more than PartConcurrency parts in flight plus the one being filled).
func TestS3MemoryBound(t *testing.T) {
	s, b, fake := fakeStore(t, 3)
	fake.Inject(s3test.UploadPart, s3test.Fault{Delay: 5 * time.Millisecond})
	data := strings.Repeat("z", 40*b.partSize)
	if _, err := s.Save(context.Background(), "u", writeString(data)); err != nil {
		t.Fatal(err)
	}
	if peak := fake.PeakConcurrent(s3test.UploadPart); peak > b.concurrency || peak < 2 {
		t.Fatalf("%d parts in flight at once, want 2 to %d", peak, b.concurrency)
	}
	if n := fake.Count(s3test.UploadPart); n != 40 {
		t.Fatalf("%d parts uploaded, want 40", n)
	}
}

// TestS3ConditionalCreate: an S3 store publishes every object with If-None-Match: *, so that a
// replica never replaces an object another one wrote under the same name. moto_server refuses
// the second write of a name, by PutObject and by CompleteMultipartUpload; gofakes3 refuses it by
// PutObject but ignores the header on CompleteMultipartUpload, so there a second multipart write
// replaces the first, as on a store without conditional writes.
func TestS3ConditionalCreate(t *testing.T) {
	for _, kind := range storeKinds(t) {
		if kind.name != "moto" && kind.name != "fakes3" {
			continue
		}
		t.Run(kind.name, func(t *testing.T) {
			s := kind.open(t, 3)
			b := s.Store.b
			ctx := context.Background()
			multipart := int(b.(*S3Backend).partSize) + 1
			for _, size := range []int{10, multipart} { // one PutObject; a multipart upload
				name := fmt.Sprintf("u.%020d.snap", size)
				write := func(w io.Writer) error { _, err := w.Write(bytes.Repeat([]byte("x"), size)); return err }
				if _, err := b.Create(ctx, name, write); err != nil {
					t.Fatal(err)
				}
				_, err := b.Create(ctx, name, write)
				if refused := errors.Is(err, fs.ErrExist); refused != (kind.name == "moto" || size == 10) {
					t.Errorf("size %d: a second write of %s: err = %v", size, name, err)
				}
			}
		})
	}
}
