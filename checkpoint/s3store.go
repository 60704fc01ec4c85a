package checkpoint

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// Sizes and defaults of S3Store.
const (
	// DefaultPartSize is the size of one multipart upload part, and so of
	// one part buffer. Snapshots up to this size are stored with one PUT.
	DefaultPartSize = 8 << 20
	// MinPartSize is the smallest part S3 accepts (except for the last).
	MinPartSize = 5 << 20
	// DefaultPartConcurrency is how many parts of one save are uploaded at
	// once.
	DefaultPartConcurrency = 2
	// DefaultS3Region is the region used when neither S3Options.Region nor
	// the AWS SDK's configuration chain names one. S3-compatible services
	// usually ignore it.
	DefaultS3Region = "us-east-1"
	// abortTimeout bounds cleaning up a failed multipart upload, which runs
	// even when the save's context is already done.
	abortTimeout = 30 * time.Second
	// responseHeaderTimeout bounds how long one S3 request waits for the
	// response headers once the request was sent.
	responseHeaderTimeout = 60 * time.Second
)

// S3Options configures an S3Store. The zero value uses the AWS SDK's
// default configuration chain for everything: region, credentials (static
// keys, web identity as on EKS with IRSA, ECS and EKS Pod Identity container
// credentials, shared profiles, EC2 instance profiles), retries.
type S3Options struct {
	// Region of the bucket. Default: the SDK chain (AWS_REGION,
	// AWS_DEFAULT_REGION, the shared profile), else DefaultS3Region.
	Region string
	// Endpoint is the base URL of an S3-compatible service (MinIO, R2,
	// Ceph, moto), such as "http://minio:9000". When set, objects are
	// addressed path-style (endpoint/bucket/key). Default: AWS S3.
	Endpoint string
	// AccessKeyID and SecretAccessKey, when both set, are static
	// credentials (with SessionToken, if any) used instead of the SDK's
	// credential chain.
	AccessKeyID, SecretAccessKey, SessionToken string
	// PartSize is the size of one upload part and read-ahead buffer bound.
	// Default DefaultPartSize; at least MinPartSize.
	PartSize int64
	// PartConcurrency is the number of parts of one save uploaded at once.
	// Default DefaultPartConcurrency.
	PartConcurrency int
	// MaxAttempts is the number of attempts of one request, retries
	// included. Default: the SDK's (3, or AWS_MAX_ATTEMPTS).
	MaxAttempts int
	// HTTPClient sends the requests. Default: the SDK's client with a
	// response header timeout of one minute.
	HTTPClient *http.Client
	// Logger receives the SDK's own warnings. Default: discarded.
	Logger *slog.Logger
}

// S3Store is a Store keeping snapshots as objects "<prefix><unit>.<seq>.snap"
// in an S3 bucket or an S3-compatible service. It gives the guarantees of
// DirStore and is safe for concurrent use: saves of different units run in
// parallel, operations on one unit are serialized within the process.
//
// Atomicity: an object becomes visible only complete, when its PutObject or
// CompleteMultipartUpload succeeds. Save streams the snapshot: one part
// buffer is filled while up to PartConcurrency earlier parts upload, so a
// save holds at most (PartConcurrency+1) × PartSize bytes (24 MiB by
// default) whatever the snapshot's size; a snapshot no larger than one part
// is stored with a single PUT. On any failure the multipart upload is
// aborted. An upload left behind by a process that died while saving is
// invisible to List and aborted by Prune once older than StaleTempAge.
//
// Ordering: Save lists the unit first and gives the new snapshot a sequence
// number above the newest one listed (the save time in unix nanoseconds,
// bumped if needed), so a replica whose clock lags still saves a newer
// snapshot. Two replicas saving the same unit at the same time both
// succeed; the later sequence number wins.
//
// Open streams the object; a download that ends before its announced length
// is an I/O error (Load then stops rather than falling back), whereas an
// object that really is short or damaged is corrupt (Load falls back).
//
// Errors start with "checkpoint: s3://bucket/prefix/:" and never contain
// credentials.
type S3Store struct {
	loc         Location
	keep        int
	client      *s3.Client
	partSize    int
	concurrency int
	partCRC     bool // send part checksums (the SDK's checksum calculation is "when supported")
	locks       unitLocks
	bufs        sync.Pool // *[]byte of partSize capacity
	now         func() time.Time
}

var _ Store = (*S3Store)(nil)

// NewS3Store returns an S3Store over an s3 Location. keep <= 0 means
// DefaultKeep. It loads the AWS configuration (which reads the standard
// AWS_* environment variables and ~/.aws files itself) but does no network
// I/O; Check verifies access. Errors name the location.
func NewS3Store(ctx context.Context, loc Location, keep int, opts S3Options) (*S3Store, error) {
	if loc.Scheme != SchemeS3 {
		return nil, fmt.Errorf("%w: %s is not an s3:// location", ErrBadURL, loc)
	}
	fail := func(err error) (*S3Store, error) { return nil, fmt.Errorf("checkpoint: %s: %w", loc, err) }
	if err := ValidateS3Endpoint(opts.Endpoint); err != nil {
		return fail(err)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return fail(err)
	}
	cfg, err := config.LoadDefaultConfig(ctx, opts.loadOptions()...)
	if err != nil {
		return fail(fmt.Errorf("loading the AWS configuration: %w", err))
	}
	if cfg.Region == "" {
		cfg.Region = DefaultS3Region
	}
	client := s3.NewFromConfig(cfg, func(o *s3.Options) {
		if opts.Endpoint != "" {
			o.BaseEndpoint = aws.String(opts.Endpoint)
		}
		o.UsePathStyle = o.BaseEndpoint != nil
		o.DisableLogOutputChecksumValidationSkipped = true
	})
	if keep <= 0 {
		keep = DefaultKeep
	}
	return &S3Store{
		loc: loc, keep: keep, client: client,
		partSize:    int(opts.PartSize),
		concurrency: opts.PartConcurrency,
		partCRC:     cfg.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired,
		now:         time.Now,
	}, nil
}

func (o S3Options) withDefaults() (S3Options, error) {
	if o.PartSize == 0 {
		o.PartSize = DefaultPartSize
	}
	if o.PartSize < MinPartSize || o.PartSize > 1<<30 {
		return o, fmt.Errorf("part size %d must be between %d (5 MiB) and 1 GiB", o.PartSize, MinPartSize)
	}
	if o.PartConcurrency <= 0 {
		o.PartConcurrency = DefaultPartConcurrency
	}
	if (o.AccessKeyID == "") != (o.SecretAccessKey == "") {
		return o, errors.New("static credentials need both an access key ID and a secret access key")
	}
	return o, nil
}

func (o S3Options) loadOptions() []func(*config.LoadOptions) error {
	var lo []func(*config.LoadOptions) error
	if o.Region != "" {
		lo = append(lo, config.WithRegion(o.Region))
	}
	if o.AccessKeyID != "" {
		lo = append(lo, config.WithCredentialsProvider(
			credentials.NewStaticCredentialsProvider(o.AccessKeyID, o.SecretAccessKey, o.SessionToken)))
	}
	if o.MaxAttempts > 0 {
		lo = append(lo, config.WithRetryMaxAttempts(o.MaxAttempts))
	}
	if o.HTTPClient != nil {
		lo = append(lo, config.WithHTTPClient(o.HTTPClient))
	} else {
		lo = append(lo, config.WithHTTPClient(awshttp.NewBuildableClient().WithTransportOptions(func(t *http.Transport) {
			t.ResponseHeaderTimeout = responseHeaderTimeout
		})))
	}
	var logger logging.Logger = logging.Nop{}
	if o.Logger != nil {
		l := o.Logger
		logger = logging.LoggerFunc(func(c logging.Classification, format string, v ...any) {
			l.Warn("aws sdk: "+fmt.Sprintf(format, v...), "classification", string(c))
		})
	}
	return append(lo, config.WithLogger(logger))
}

// ErrBadEndpoint is wrapped by the errors of ValidateS3Endpoint.
var ErrBadEndpoint = errors.New("checkpoint: invalid S3 endpoint")

// ValidateS3Endpoint checks an S3 endpoint URL: empty, or
// http(s)://host[:port][/path] without credentials, query or fragment.
// Errors wrap ErrBadEndpoint and never repeat credentials.
func ValidateS3Endpoint(endpoint string) error {
	if endpoint == "" {
		return nil
	}
	u, err := url.Parse(endpoint)
	switch {
	case err != nil:
		return fmt.Errorf("%w: it does not parse: %v", ErrBadEndpoint, errors.Unwrap(err))
	case u.Scheme != "http" && u.Scheme != "https":
		return fmt.Errorf("%w: it must start with http:// or https://", ErrBadEndpoint)
	case u.User != nil:
		return fmt.Errorf("%w: it must not contain credentials", ErrBadEndpoint)
	case u.Host == "":
		return fmt.Errorf("%w: %s has no host", ErrBadEndpoint, redacted(u))
	case u.RawQuery != "" || u.Fragment != "":
		return fmt.Errorf("%w: %s must not have a query or fragment", ErrBadEndpoint, redacted(u))
	}
	return nil
}

// URL returns the store's location as a URL (without credentials).
func (s *S3Store) URL() string { return s.loc.String() }

// Keep returns the number of snapshots retained per unit.
func (s *S3Store) Keep() int { return s.keep }

func (s *S3Store) key(name string) string { return s.loc.Prefix + name }

func (s *S3Store) errorf(format string, args ...any) error {
	return fmt.Errorf("checkpoint: %s: "+format, append([]any{s.loc}, args...)...)
}

// Check verifies that the bucket can be listed under the prefix with the
// configured credentials, so a wrong bucket, endpoint or credential shows at
// start-up rather than at the first save. The error names the location.
func (s *S3Store) Check(ctx context.Context) error {
	_, err := s.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(s.loc.Prefix), MaxKeys: aws.Int32(1),
	})
	if err != nil {
		return s.errorf("cannot list the bucket: %w", err)
	}
	return nil
}

// Save implements Store.Save, streaming the snapshot as described on
// S3Store. write receives a writer that buffers one part and must not
// retain it. On failure nothing new is visible and the error says what
// failed. If the snapshot was stored but pruning older ones failed, Save
// returns the valid Info with an error wrapping ErrPrune.
func (s *S3Store) Save(ctx context.Context, unit string, write func(w io.Writer) error) (Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return Info{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, s.errorf("save %s: %w", unit, err)
	}
	l := s.locks.lock(unit)
	l.Lock()
	defer l.Unlock()
	fail := func(what string, err error) (Info, error) {
		return Info{}, s.errorf("save %s: %s: %w", unit, what, err)
	}
	existing, err := s.list(ctx, unit)
	if err != nil {
		return fail("listing", err)
	}
	now := s.now()
	seq := nextSeq(existing, now)
	name := snapName(unit, seq)
	up := s.newUpload(ctx, s.key(name))
	if err := write(ctxWriter{ctx, up}); err != nil {
		return fail("writing snapshot", up.abort(err))
	}
	if err := ctx.Err(); err != nil {
		return fail("before commit", up.abort(err))
	}
	size, err := up.finish()
	if err != nil {
		return fail("uploading "+name, err)
	}
	info := Info{Unit: unit, Name: name, Seq: seq, Size: size, ModTime: now}
	if err := s.pruneLocked(ctx, unit); err != nil {
		return info, fmt.Errorf("%w: %s: %w", ErrPrune, unit, err)
	}
	return info, nil
}

// nextSeq returns the sequence number of a snapshot saved at now: now in
// unix nanoseconds, or one above the newest existing snapshot if that is
// not below.
func nextSeq(existing []Info, now time.Time) uint64 {
	seq := uint64(max(now.UnixNano(), 0))
	for _, e := range existing {
		if e.Seq >= seq {
			seq = e.Seq + 1
		}
	}
	return seq
}

// List implements Store.List with ListObjectsV2 under "<prefix><unit>.".
func (s *S3Store) List(ctx context.Context, unit string) ([]Info, error) {
	if err := ValidateUnit(unit); err != nil {
		return nil, err
	}
	infos, err := s.list(ctx, unit)
	if err != nil {
		return nil, s.errorf("list %s: %w", unit, err)
	}
	return infos, nil
}

func (s *S3Store) list(ctx context.Context, unit string) ([]Info, error) {
	var infos []Info
	p := s3.NewListObjectsV2Paginator(s.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(s.key(unit + ".")),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			name := strings.TrimPrefix(aws.ToString(o.Key), s.loc.Prefix)
			seq, ok := parseSnapName(unit, name)
			if !ok {
				continue
			}
			infos = append(infos, Info{Unit: unit, Name: name, Seq: seq,
				Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	slices.SortFunc(infos, func(a, b Info) int { return cmp.Compare(b.Seq, a.Seq) }) // newest first
	return infos, nil
}

// Open implements Store.Open with a streaming GetObject. The reader reports
// the object's size to the decoder (see NewDecoder) and turns a download
// that ends early into an I/O error. A snapshot pruned in the meantime
// yields an error wrapping fs.ErrNotExist; a name that is not a snapshot of
// snap.Unit one wrapping ErrBadUnit.
func (s *S3Store) Open(ctx context.Context, snap Info) (io.ReadCloser, error) {
	if err := validateSnap(snap); err != nil {
		return nil, err
	}
	out, err := s.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(snap.Name))})
	if err != nil {
		if isNoSuchKey(err) {
			return nil, s.errorf("open %s: %w", snap.Name, fs.ErrNotExist)
		}
		return nil, s.errorf("open %s: %w", snap.Name, err)
	}
	size := aws.ToInt64(out.ContentLength)
	if out.ContentLength == nil || size < 0 {
		size = -1
	}
	return &objectReader{body: out.Body, size: size, name: snap.Name, store: s}, nil
}

// isNoSuchKey reports whether err says the object does not exist (and not,
// say, that the bucket does not).
func isNoSuchKey(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode() == "NoSuchKey"
	}
	return false
}

// objectReader streams an object's body. It implements Size and a Seek
// that only reports the position, so the Decoder can check the snapshot's
// length before anything is allocated.
type objectReader struct {
	body  io.ReadCloser
	size  int64 // -1 if unknown
	n     int64
	name  string
	store *S3Store
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.n += int64(n)
	if r.size >= 0 && r.n > r.size {
		return n, r.store.errorf("read %s: got more than the announced %d bytes", r.name, r.size)
	}
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && r.size >= 0 && r.n < r.size {
		// A short transfer is not a short snapshot: report an I/O error, not io.EOF (which the
		// decoder would take for corruption and skip a good snapshot).
		return n, r.store.errorf("read %s: download ended after %d of %d bytes", r.name, r.n, r.size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = r.store.errorf("read %s: %w", r.name, err)
	}
	return n, err
}

// Size returns the object's length, or -1 if the server did not say.
func (r *objectReader) Size() int64 { return r.size }

// Seek supports only Seek(0, io.SeekCurrent), which returns the number of
// bytes read so far.
func (r *objectReader) Seek(offset int64, whence int) (int64, error) {
	if offset != 0 || whence != io.SeekCurrent || r.size < 0 {
		return 0, errors.New("checkpoint: s3 object reader cannot seek")
	}
	return r.n, nil
}

func (r *objectReader) Close() error { return r.body.Close() }

// Prune implements Store.Prune: it deletes all but the newest Keep
// snapshots of unit and aborts the unit's multipart uploads started more
// than StaleTempAge ago (left by a process that died while saving). Errors
// are joined and returned after trying everything.
func (s *S3Store) Prune(ctx context.Context, unit string) error {
	if err := ValidateUnit(unit); err != nil {
		return err
	}
	l := s.locks.lock(unit)
	l.Lock()
	defer l.Unlock()
	if err := s.pruneLocked(ctx, unit); err != nil {
		return s.errorf("prune %s: %w", unit, err)
	}
	return nil
}

func (s *S3Store) pruneLocked(ctx context.Context, unit string) error {
	infos, err := s.list(ctx, unit)
	if err != nil {
		return fmt.Errorf("listing: %w", err)
	}
	var errs []error
	if len(infos) > s.keep {
		for _, info := range infos[s.keep:] {
			_, err := s.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(s.loc.Bucket), Key: aws.String(s.key(info.Name))})
			if err != nil && !isNoSuchKey(err) {
				errs = append(errs, fmt.Errorf("deleting %s: %w", info.Name, err))
			}
		}
	}
	if err := s.abortStaleUploads(ctx, unit); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// abortStaleUploads aborts the unit's multipart uploads initiated more than
// StaleTempAge ago.
func (s *S3Store) abortStaleUploads(ctx context.Context, unit string) error {
	p := s3.NewListMultipartUploadsPaginator(s.client, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(s.loc.Bucket), Prefix: aws.String(s.key(unit + ".")),
	})
	var errs []error
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing multipart uploads: %w", err)
		}
		for _, u := range page.Uploads {
			name := strings.TrimPrefix(aws.ToString(u.Key), s.loc.Prefix)
			if _, ok := parseSnapName(unit, name); !ok || s.now().Sub(aws.ToTime(u.Initiated)) <= StaleTempAge {
				continue
			}
			_, err := s.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: aws.String(s.loc.Bucket), Key: u.Key, UploadId: u.UploadId,
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("aborting the stale upload of %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}

// unitLocks hands out one mutex per unit name.
type unitLocks struct {
	mu sync.Mutex
	m  map[string]*sync.Mutex
}

func (u *unitLocks) lock(unit string) *sync.Mutex {
	u.mu.Lock()
	defer u.mu.Unlock()
	if u.m == nil {
		u.m = make(map[string]*sync.Mutex)
	}
	l, ok := u.m[unit]
	if !ok {
		l = new(sync.Mutex)
		u.m[unit] = l
	}
	return l
}
