package checkpoint

import (
	"bytes"
	"context"
	"io"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kdedup/kdedup/checkpoint/s3test"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/internal/ckpttest"
)

// BenchmarkS3Snapshot saves and loads one 55 MB snapshot (the size of a
// filter with the default window settings) through a Store over an S3Backend, beside a
// plain PUT and GET of the same number of bytes over the same client and
// server, on the in-process fake and on moto_server:
//
//	go test ./checkpoint -run '^$' -bench S3Snapshot -benchtime 5x
//
// The ratio sub-benchmarks run both contenders in every iteration and
// compare best times (save+load-x-vs-put+get; 1.0 = as fast as the plain
// copy). B/op of save+load shows the streaming: it stays near the part
// buffers, far below the snapshot's size.
func BenchmarkS3Snapshot(b *testing.B) {
	servers := []struct {
		name  string
		start func(b *testing.B) (endpoint, bucket string)
	}{
		{"fake", func(b *testing.B) (string, string) {
			f := s3test.NewFake()
			b.Cleanup(f.Close)
			f.CreateBucket("bench")
			return f.Endpoint(), "bench"
		}},
		{"moto", func(b *testing.B) (string, string) {
			m := s3test.StartMoto(b)
			m.CreateBucket(b, "bench")
			return m.Endpoint(), "bench"
		}},
	}
	for _, srv := range servers {
		b.Run("server="+srv.name, func(b *testing.B) {
			endpoint, bucket := srv.start(b)
			benchS3Snapshot(b, newTestS3Backend(b, endpoint, "s3://"+bucket+"/bench", 0))
		})
	}
}

func benchS3Snapshot(b *testing.B, be *S3Backend) {
	ctx := context.Background()
	s := NewStore(be, 1)
	h := testHeader(55_000_000 / 256) // 32 words per group
	words := ckpttest.Words(h.Words, 5)
	dst := make([]uint64, h.Words)
	raw := make([]byte, h.DataBytes())
	_ = snapshottest.WriteWords(bytes.NewBuffer(raw[:0]), words)
	size := int64(len(raw))

	snapshot := func() {
		_, err := s.Save(ctx, "bench.p0", func(w io.Writer) error {
			return snapshottest.Encode(w, h, func(w io.Writer) error { return snapshottest.WriteWords(w, words) })
		})
		if err != nil {
			b.Fatal(err)
		}
		_, res, err := Load(ctx, s, "bench.p0", func(h snapshot.Header, d *snapshot.Decoder) (struct{}, error) {
			return struct{}{}, snapshottest.ReadWords(d, dst)
		})
		if err != nil || res.Outcome != OutcomeWarm {
			b.Fatalf("Load = %s, %v", res.Outcome, err)
		}
	}
	plain := func() {
		key := aws.String(be.key("plain.bin"))
		_, err := be.client.PutObject(ctx, &s3.PutObjectInput{Bucket: aws.String(be.loc.Bucket), Key: key,
			Body: bytes.NewReader(raw), ContentLength: aws.Int64(size)})
		if err != nil {
			b.Fatal(err)
		}
		out, err := be.client.GetObject(ctx, &s3.GetObjectInput{Bucket: aws.String(be.loc.Bucket), Key: key})
		if err != nil {
			b.Fatal(err)
		}
		defer out.Body.Close()
		if _, err := io.ReadFull(out.Body, raw); err != nil {
			b.Fatal(err)
		}
	}
	b.Run("save+load", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			snapshot()
		}
	})
	b.Run("baseline-put+get", func(b *testing.B) {
		b.ReportAllocs()
		b.SetBytes(size)
		for b.Loop() {
			plain()
		}
	})
	b.Run("ratio", func(b *testing.B) {
		ckpttest.Ratio(b, size, map[string]func(){"save+load": snapshot, "put+get": plain}, "save+load", "put+get")
	})
}
