package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"
	"github.com/aws/smithy-go/logging"
)

// Sizes and defaults of S3Backend.
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

// S3Options configures an S3Backend. The zero value uses the AWS SDK's
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

// S3Backend is a Backend keeping objects as "<prefix><name>" in an S3 bucket or an S3-compatible
// service (MinIO, R2, Ceph). It is safe for concurrent use.
//
// Atomicity: an object becomes visible only complete, when its PutObject or
// CompleteMultipartUpload succeeds. Create streams the object: one part buffer is filled while up
// to PartConcurrency earlier parts upload, so a Create holds at most (PartConcurrency+1) × PartSize
// bytes (24 MiB by default) whatever the object's size; an object no larger than one part is
// stored with a single PUT. On any failure the multipart upload is aborted; one left behind by a
// process that died while saving is invisible to List, and Sweep aborts it.
//
// Conditional publication: both commits carry If-None-Match: *, so the store refuses to replace
// an object of the same name (two replicas that numbered a save alike): Create then fails with an
// error wrapping fs.ErrExist. AWS S3 and moto_server honour it on both; gofakes3 only on
// PutObject. A store that answers NotImplemented gets plain writes from then on.
//
// Open streams the object; a download that ends before its announced length is an I/O error (Load
// then stops rather than falling back), whereas an object that really is short or damaged is
// corrupt (Load falls back).
type S3Backend struct {
	loc         Location
	client      *s3.Client
	partSize    int
	concurrency int
	partCRC     bool      // send part checksums (the SDK's checksum calculation is "when supported")
	bufs        sync.Pool // *[]byte of partSize capacity
	// unconditional is set once the store answered a conditional write (If-None-Match) with
	// NotImplemented: later writes are plain ones (see conditional).
	unconditional atomic.Bool
}

var _ Backend = (*S3Backend)(nil)

// NewS3Backend returns an S3Backend over an s3 Location. It loads the AWS configuration (which
// reads the standard AWS_* environment variables and ~/.aws files itself) but does no network
// I/O; Store.Check verifies access. Errors name the location.
func NewS3Backend(ctx context.Context, loc Location, opts S3Options) (*S3Backend, error) {
	if loc.Scheme != SchemeS3 {
		return nil, fmt.Errorf("%w: %s is not an s3:// location", ErrBadURL, loc)
	}
	fail := func(err error) (*S3Backend, error) { return nil, fmt.Errorf("checkpoint: %s: %w", loc, err) }
	if err := ValidateS3Endpoint(opts.Endpoint); err != nil {
		return fail(err)
	}
	opts, err := opts.withDefaults()
	if err != nil {
		return fail(err)
	}
	cfg, err := LoadAWSConfig(ctx, opts)
	if err != nil {
		return fail(err)
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
	return &S3Backend{
		loc: loc, client: client,
		partSize:    int(opts.PartSize),
		concurrency: opts.PartConcurrency,
		partCRC:     cfg.RequestChecksumCalculation != aws.RequestChecksumCalculationWhenRequired,
	}, nil
}

// LoadAWSConfig returns the AWS configuration the S3 store uses, from opts' region, static
// credentials and logger, else the SDK's default chain (environment, web identity as with EKS
// IRSA, container credentials, shared profiles, EC2 instance profile). Other AWS clients of
// kdedup (the AWS_MSK_IAM Kafka mechanism) sign with it, so that one set of AWS_* settings
// serves both. It does no network I/O; Region may be empty.
func LoadAWSConfig(ctx context.Context, opts S3Options) (aws.Config, error) {
	cfg, err := config.LoadDefaultConfig(ctx, opts.loadOptions()...)
	if err != nil {
		return aws.Config{}, fmt.Errorf("loading the AWS configuration: %w", err)
	}
	return cfg, nil
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

// String returns the location as "s3://bucket/prefix/" (without credentials).
func (b *S3Backend) String() string { return b.loc.String() }

func (b *S3Backend) key(name string) string { return b.loc.Prefix + name }

// Create implements Backend, streaming the object as described on S3Backend.
func (b *S3Backend) Create(ctx context.Context, name string, write func(w io.Writer) error) (Object, error) {
	if err := validObject(name); err != nil {
		return Object{}, err
	}
	up := b.newUpload(ctx, b.key(name))
	if err := write(up); err != nil {
		return Object{}, fmt.Errorf("writing: %w", up.abort(err))
	}
	if err := ctx.Err(); err != nil {
		return Object{}, fmt.Errorf("before commit: %w", up.abort(err))
	}
	size, err := up.finish()
	if err != nil {
		return Object{}, fmt.Errorf("uploading %s: %w", name, err)
	}
	return Object{Name: name, Size: size, ModTime: time.Now()}, nil
}

// List implements Backend with ListObjectsV2 under "<prefix><prefix argument>".
func (b *S3Backend) List(ctx context.Context, prefix string) ([]Object, error) {
	var objs []Object
	p := s3.NewListObjectsV2Paginator(b.client, &s3.ListObjectsV2Input{
		Bucket: aws.String(b.loc.Bucket), Prefix: aws.String(b.key(prefix)),
	})
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return nil, err
		}
		for _, o := range page.Contents {
			objs = append(objs, Object{Name: strings.TrimPrefix(aws.ToString(o.Key), b.loc.Prefix),
				Size: aws.ToInt64(o.Size), ModTime: aws.ToTime(o.LastModified)})
		}
	}
	return objs, nil
}

// Open implements Backend with a streaming GetObject. The reader reports the object's size and
// turns a download that ends early into an I/O error. A missing object yields an error wrapping
// fs.ErrNotExist (a missing bucket does not).
func (b *S3Backend) Open(ctx context.Context, name string) (ObjectReader, error) {
	if err := validObject(name); err != nil {
		return nil, err
	}
	out, err := b.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(b.loc.Bucket), Key: aws.String(b.key(name))})
	if isNoSuchKey(err) {
		return nil, fmt.Errorf("%w: %w", fs.ErrNotExist, err)
	}
	if err != nil {
		return nil, err
	}
	size := aws.ToInt64(out.ContentLength)
	if out.ContentLength == nil || size < 0 {
		size = -1
	}
	return &objectReader{body: out.Body, size: size, name: name}, nil
}

// conditional returns the If-None-Match value of a write: "*", so that the store refuses to
// replace an object of the same name (two replicas numbering a save alike), or nil once the store
// said it does not implement conditional writes.
func (b *S3Backend) conditional() *string {
	if b.unconditional.Load() {
		return nil
	}
	return aws.String("*")
}

// notConditional reports whether err is the store's refusal of a conditional write it does not
// implement, and if so remembers it: the caller writes again without the condition.
func (b *S3Backend) notConditional(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) && ae.ErrorCode() == "NotImplemented" && !b.unconditional.Swap(true) {
		return true
	}
	return false
}

// objectExists wraps err with fs.ErrExist when it is the store's refusal of a conditional write
// (PreconditionFailed, or ConditionalRequestConflict for a concurrent one): an object of the name
// exists.
func objectExists(err error) error {
	var ae smithy.APIError
	if errors.As(err, &ae) && (ae.ErrorCode() == "PreconditionFailed" || ae.ErrorCode() == "ConditionalRequestConflict") {
		return fmt.Errorf("%w: %w", fs.ErrExist, err)
	}
	return err
}

// isNoSuchKey reports whether err says the object does not exist (and not, say, that the bucket
// does not).
func isNoSuchKey(err error) bool {
	var ae smithy.APIError
	if errors.As(err, &ae) {
		return ae.ErrorCode() == "NoSuchKey"
	}
	return false
}

// objectReader streams an object's body and checks its length against the announced one.
type objectReader struct {
	body io.ReadCloser
	size int64 // -1 if unknown
	n    int64
	name string
}

func (r *objectReader) Read(p []byte) (int, error) {
	n, err := r.body.Read(p)
	r.n += int64(n)
	if r.size >= 0 && r.n > r.size {
		return n, fmt.Errorf("read %s: got more than the announced %d bytes", r.name, r.size)
	}
	if err != nil && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF)) && r.size >= 0 && r.n < r.size {
		// A short transfer is not a short snapshot: report an I/O error, not io.EOF (which the
		// decoder would take for corruption and skip a good snapshot).
		return n, fmt.Errorf("read %s: download ended after %d of %d bytes", r.name, r.n, r.size)
	}
	if err != nil && !errors.Is(err, io.EOF) {
		err = fmt.Errorf("read %s: %w", r.name, err)
	}
	return n, err
}

// Size returns the object's length, or -1 if the server did not say.
func (r *objectReader) Size() int64 { return r.size }

func (r *objectReader) Close() error { return r.body.Close() }

// Delete implements Backend with DeleteObject.
func (b *S3Backend) Delete(ctx context.Context, name string) error {
	if err := validObject(name); err != nil {
		return err
	}
	_, err := b.client.DeleteObject(ctx, &s3.DeleteObjectInput{Bucket: aws.String(b.loc.Bucket), Key: aws.String(b.key(name))})
	if err != nil && !isNoSuchKey(err) {
		return err
	}
	return nil
}

// Sweep implements Backend: it aborts the multipart uploads of the objects it selects that were
// initiated before before.
func (b *S3Backend) Sweep(ctx context.Context, prefix string, before time.Time, match func(name string) bool) error {
	p := s3.NewListMultipartUploadsPaginator(b.client, &s3.ListMultipartUploadsInput{
		Bucket: aws.String(b.loc.Bucket), Prefix: aws.String(b.key(prefix)),
	})
	var errs []error
	for p.HasMorePages() {
		page, err := p.NextPage(ctx)
		if err != nil {
			return fmt.Errorf("listing multipart uploads: %w", err)
		}
		for _, u := range page.Uploads {
			name := strings.TrimPrefix(aws.ToString(u.Key), b.loc.Prefix)
			if !match(name) || !aws.ToTime(u.Initiated).Before(before) {
				continue
			}
			_, err := b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
				Bucket: aws.String(b.loc.Bucket), Key: u.Key, UploadId: u.UploadId,
			})
			if err != nil {
				errs = append(errs, fmt.Errorf("aborting the stale upload of %s: %w", name, err))
			}
		}
	}
	return errors.Join(errs...)
}
