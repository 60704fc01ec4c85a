package checkpoint

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"strings"
)

// ErrBadURL is wrapped by every error ParseURL and OpenLocation return for a store
// URL that cannot be used.
var ErrBadURL = errors.New("checkpoint: invalid store URL")

// The schemes of a store URL.
const (
	// SchemeFile is a DirBackend over a local (or mounted) directory.
	SchemeFile = "file"
	// SchemeS3 is an S3Backend over an S3 bucket or an S3-compatible service.
	SchemeS3 = "s3"
)

// Location is a parsed store URL: "file:///abs/dir" or "s3://bucket/prefix".
type Location struct {
	// Scheme is SchemeFile or SchemeS3.
	Scheme string
	// Dir is the absolute, cleaned directory of a file location.
	Dir string
	// Bucket is the bucket of an s3 location.
	Bucket string
	// Prefix is prepended to every object name of an s3 location: empty,
	// or ending in "/". Objects are named Prefix + "<unit>.<seq>.snap".
	Prefix string
}

// String returns the canonical URL of l: "file:///abs/dir" or
// "s3://bucket/prefix/". It never holds credentials, so it is safe to log
// and to put in errors.
func (l Location) String() string {
	switch l.Scheme {
	case SchemeFile:
		return (&url.URL{Scheme: SchemeFile, Path: filepath.ToSlash(l.Dir)}).String()
	case SchemeS3:
		return "s3://" + l.Bucket + "/" + l.Prefix
	}
	return l.Scheme + "://?"
}

// DirLocation returns the file location of dir (made absolute), as
// CHECKPOINT_DIR means it. It fails, wrapping ErrBadURL, for an empty dir or
// when the working directory cannot be determined.
func DirLocation(dir string) (Location, error) {
	if dir == "" {
		return Location{}, fmt.Errorf("%w: empty directory", ErrBadURL)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return Location{}, fmt.Errorf("%w: directory %q: %w", ErrBadURL, dir, err)
	}
	return Location{Scheme: SchemeFile, Dir: abs}, nil
}

// ParseURL parses a store URL:
//
//	file:///var/lib/kdedup        a directory (DirBackend); the path must be absolute
//	s3://bucket                   a bucket, objects at its root (S3Backend)
//	s3://bucket/some/prefix       objects under "some/prefix/"
//
// User information (credentials), query strings and fragments are refused:
// S3 credentials come from the AWS variables, never from the URL. Errors
// wrap ErrBadURL and never repeat a password or a query.
func ParseURL(raw string) (Location, error) {
	bad := func(format string, args ...any) (Location, error) {
		return Location{}, fmt.Errorf("%w: "+format, append([]any{ErrBadURL}, args...)...)
	}
	if strings.TrimSpace(raw) == "" {
		return bad("empty URL")
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok {
		return bad("%q has no scheme: want file:///absolute/dir or s3://bucket/prefix", raw)
	}
	u, err := url.Parse(raw)
	if err != nil {
		// url.Error repeats the input, which may hold a password: say only what is wrong.
		return bad("%s URL does not parse: %v", scheme, errors.Unwrap(err))
	}
	switch {
	case u.User != nil:
		return bad("%s://… must not contain credentials (user:password@); use the AWS_* variables", u.Scheme)
	case u.RawQuery != "" || u.ForceQuery:
		return bad("%s: query strings are not supported", redacted(u))
	case u.Fragment != "":
		return bad("%s: fragments are not supported", redacted(u))
	}
	switch strings.ToLower(u.Scheme) {
	case SchemeFile:
		return parseFileURL(u)
	case SchemeS3:
		return parseS3URL(u)
	}
	return bad("scheme %q is not supported: want file:// or s3://", u.Scheme)
}

func parseFileURL(u *url.URL) (Location, error) {
	if u.Host != "" && u.Host != "localhost" {
		return Location{}, fmt.Errorf("%w: file://%s%s: remote hosts are not supported (write file:///path)", ErrBadURL, u.Host, u.Path)
	}
	if u.Path == "" || !strings.HasPrefix(u.Path, "/") {
		return Location{}, fmt.Errorf("%w: %s: want an absolute path, like file:///var/lib/kdedup", ErrBadURL, redacted(u))
	}
	return Location{Scheme: SchemeFile, Dir: filepath.Clean(filepath.FromSlash(u.Path))}, nil
}

func parseS3URL(u *url.URL) (Location, error) {
	if err := validateBucket(u.Host); err != nil {
		return Location{}, fmt.Errorf("%w: %s: %w", ErrBadURL, redacted(u), err)
	}
	prefix := strings.TrimPrefix(u.Path, "/")
	if prefix != "" && !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	if strings.Contains(prefix, "//") || len(prefix) > 512 {
		return Location{}, fmt.Errorf("%w: %s: the prefix must not contain empty segments or exceed 512 bytes", ErrBadURL, redacted(u))
	}
	return Location{Scheme: SchemeS3, Bucket: u.Host, Prefix: prefix}, nil
}

// validateBucket checks a bucket name against S3's rules, loosened for
// legacy and S3-compatible names: 3 to 63 letters, digits, '.', '-' and '_',
// starting and ending with a letter or digit.
func validateBucket(b string) error {
	if len(b) < 3 || len(b) > 63 {
		return fmt.Errorf("bucket name %q must be 3 to 63 characters", b)
	}
	alnum := func(c byte) bool { return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' }
	for i := 0; i < len(b); i++ {
		if c := b[i]; !alnum(c) && c != '.' && c != '-' && c != '_' {
			return fmt.Errorf("bucket name %q contains %q", b, c)
		}
	}
	if !alnum(b[0]) || !alnum(b[len(b)-1]) {
		return fmt.Errorf("bucket name %q must start and end with a letter or digit", b)
	}
	return nil
}

// redacted returns u without user information or query, for messages.
func redacted(u *url.URL) string {
	c := *u
	c.User, c.RawQuery, c.ForceQuery, c.Fragment = nil, "", false, ""
	return c.String()
}

// Options configures OpenLocation.
type Options struct {
	// Keep is the number of snapshots retained per unit. Default DefaultKeep.
	Keep int
	// S3 configures s3:// locations; it is ignored for file://.
	S3 S3Options
}

// OpenLocation returns the Store for a parsed store URL (see ParseURL): over a DirBackend for
// file://, creating the directory if needed, or over an S3Backend for s3://. It does no network
// I/O; call Store.Check to verify access early. Errors name the location (without credentials);
// an unknown scheme wraps ErrBadURL.
func OpenLocation(ctx context.Context, loc Location, opts Options) (*Store, error) {
	var b Backend
	var err error
	switch loc.Scheme {
	case SchemeFile:
		b, err = NewDirBackend(loc.Dir)
		if err != nil {
			return nil, fmt.Errorf("%w (%s)", err, loc)
		}
	case SchemeS3:
		if b, err = NewS3Backend(ctx, loc, opts.S3); err != nil {
			return nil, err
		}
	default:
		return nil, fmt.Errorf("%w: scheme %q is not supported", ErrBadURL, loc.Scheme)
	}
	return NewStore(b, opts.Keep), nil
}
