package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// upload is the io.Writer of one S3Backend.Create: it fills a part buffer and,
// when the buffer is full and more data comes, hands it to a goroutine that
// uploads it as the next part of a multipart upload (created with the first
// part) while the writer fills another buffer. At most concurrency parts are
// in flight, so an upload holds at most concurrency+1 buffers. A snapshot
// that fits one buffer is stored with a single PutObject by finish.
//
// An upload is used by one goroutine (the Save), apart from its part
// goroutines, which only touch parts, err and the buffer pool under mu.
type upload struct {
	b   *S3Backend
	ctx context.Context
	key string

	buf  *[]byte // the part being filled; nil before the first write
	n    int64   // bytes written
	id   string  // multipart upload ID, "" until the first part is sent
	next int32   // number of the next part to send
	sem  chan struct{}
	wg   sync.WaitGroup

	mu    sync.Mutex
	parts []types.CompletedPart
	err   error // first part failure
}

func (b *S3Backend) newUpload(ctx context.Context, key string) *upload {
	return &upload{b: b, ctx: ctx, key: key, next: 1, sem: make(chan struct{}, b.concurrency)}
}

func (b *S3Backend) getBuf() *[]byte {
	if buf, ok := b.bufs.Get().(*[]byte); ok {
		*buf = (*buf)[:0]
		return buf
	}
	buf := make([]byte, 0, b.partSize)
	return &buf
}

func (u *upload) failed() error {
	u.mu.Lock()
	defer u.mu.Unlock()
	return u.err
}

// Write implements io.Writer.
func (u *upload) Write(p []byte) (int, error) {
	written := 0
	for len(p) > 0 {
		if u.buf == nil {
			u.buf = u.b.getBuf()
		}
		b := *u.buf
		if len(b) == cap(b) {
			if err := u.sendPart(); err != nil {
				return written, err
			}
			continue
		}
		n := copy(b[len(b):cap(b)], p)
		*u.buf = b[:len(b)+n]
		p, written, u.n = p[n:], written+n, u.n+int64(n)
	}
	return written, nil
}

// sendPart starts uploading the filled buffer as the next part, creating
// the multipart upload first if needed. It blocks while concurrency parts
// are in flight and returns the first failure of any part.
func (u *upload) sendPart() error {
	if err := u.failed(); err != nil {
		return err
	}
	if u.id == "" {
		in := &s3.CreateMultipartUploadInput{Bucket: aws.String(u.b.loc.Bucket), Key: aws.String(u.key)}
		if u.b.partCRC {
			in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32
		}
		out, err := u.b.client.CreateMultipartUpload(u.ctx, in)
		if err != nil {
			return fmt.Errorf("creating the multipart upload: %w", err)
		}
		u.id = aws.ToString(out.UploadId)
	}
	select {
	case u.sem <- struct{}{}:
	case <-u.ctx.Done():
		return u.ctx.Err()
	}
	buf, num := u.buf, u.next
	u.buf, u.next = nil, u.next+1
	u.wg.Go(func() {
		defer func() { <-u.sem }()
		err := u.putPart(num, *buf)
		if err == nil {
			// Only now is the HTTP transport surely done with the bytes: after a failure it may
			// still be writing the body of an abandoned attempt.
			u.b.bufs.Put(buf)
		}
		if err != nil {
			u.mu.Lock()
			if u.err == nil {
				u.err = err
			}
			u.mu.Unlock()
		}
	})
	return u.failed()
}

// putPart uploads one part and records it.
func (u *upload) putPart(num int32, data []byte) error {
	in := &s3.UploadPartInput{
		Bucket: aws.String(u.b.loc.Bucket), Key: aws.String(u.key), UploadId: aws.String(u.id),
		PartNumber: aws.Int32(num), Body: bytes.NewReader(data), ContentLength: aws.Int64(int64(len(data))),
	}
	if u.b.partCRC {
		in.ChecksumAlgorithm = types.ChecksumAlgorithmCrc32
	}
	out, err := u.b.client.UploadPart(u.ctx, in)
	if err != nil {
		return fmt.Errorf("uploading part %d: %w", num, err)
	}
	u.mu.Lock()
	u.parts = append(u.parts, types.CompletedPart{PartNumber: aws.Int32(num), ETag: out.ETag, ChecksumCRC32: out.ChecksumCRC32})
	u.mu.Unlock()
	return nil
}

// finish makes the object visible — one PutObject, or the last part and
// CompleteMultipartUpload — and returns its size. On failure it aborts.
func (u *upload) finish() (int64, error) {
	if u.buf == nil {
		u.buf = u.b.getBuf() // an empty snapshot is still an object
	}
	if u.id == "" {
		put := func() error {
			_, err := u.b.client.PutObject(u.ctx, &s3.PutObjectInput{
				Bucket: aws.String(u.b.loc.Bucket), Key: aws.String(u.key), IfNoneMatch: u.b.conditional(),
				Body: bytes.NewReader(*u.buf), ContentLength: aws.Int64(int64(len(*u.buf))),
			})
			return err
		}
		err := put()
		if err != nil && u.b.notConditional(err) {
			err = put()
		}
		if err = objectExists(err); err != nil {
			u.buf = nil // not reused: see sendPart
			return 0, fmt.Errorf("putting the object: %w", err)
		}
		u.b.bufs.Put(u.buf)
		u.buf = nil
		return u.n, nil
	}
	if err := u.sendPart(); err != nil {
		return 0, u.abort(err)
	}
	u.wg.Wait()
	if err := u.failed(); err != nil {
		return 0, u.abort(err)
	}
	slices.SortFunc(u.parts, func(a, b types.CompletedPart) int { return int(aws.ToInt32(a.PartNumber) - aws.ToInt32(b.PartNumber)) })
	complete := func() error {
		_, err := u.b.client.CompleteMultipartUpload(u.ctx, &s3.CompleteMultipartUploadInput{
			Bucket: aws.String(u.b.loc.Bucket), Key: aws.String(u.key), UploadId: aws.String(u.id),
			MultipartUpload: &types.CompletedMultipartUpload{Parts: u.parts}, IfNoneMatch: u.b.conditional(),
		})
		return err
	}
	err := complete()
	if err != nil && u.b.notConditional(err) {
		err = complete()
	}
	if err = objectExists(err); err != nil {
		return 0, u.abort(fmt.Errorf("completing the multipart upload: %w", err))
	}
	return u.n, nil
}

// abort waits for the parts in flight, aborts the multipart upload (if one
// was created) with a context of its own, since the save's may be done, and
// returns cause, joined with the abort's failure if any.
func (u *upload) abort(cause error) error {
	u.wg.Wait()
	if u.buf != nil {
		u.b.bufs.Put(u.buf)
		u.buf = nil
	}
	if u.id == "" {
		return cause
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(u.ctx), abortTimeout)
	defer cancel()
	_, err := u.b.client.AbortMultipartUpload(ctx, &s3.AbortMultipartUploadInput{
		Bucket: aws.String(u.b.loc.Bucket), Key: aws.String(u.key), UploadId: aws.String(u.id),
	})
	u.id = ""
	if err != nil {
		return errors.Join(cause, fmt.Errorf("aborting the multipart upload failed (Prune removes it after %v): %w", StaleTempAge, err))
	}
	return cause
}
