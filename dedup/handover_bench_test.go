package dedup

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/s3test"
	"github.com/kdedup/kdedup/internal/ckpttest"
	"github.com/kdedup/kdedup/window"
)

// handoverWindow is the default window (8 generations, 1M identities per interval at 1e-6): a
// filter of about 39 MB (55 MB before the sectorized layout).
var handoverWindow = window.Config{Generations: 8, Interval: 15 * time.Minute, Capacity: 1_000_000, FalsePositiveRate: 1e-6}

// BenchmarkHandover moves one partition's default-window filter from one replica to another through a
// checkpoint store: Revoke on the old owner (final snapshot, upload) and Assign on the new one
// (listing, download, restore into a new filter). Beside it, in the same run and over the same
// store, the plain copy of as many bytes (the store's backend Create of raw bytes, then Open and read them
// back), and the retained partition (Revoke, then Assign on the same replica: the snapshot is
// still uploaded, nothing is downloaded). Stores: a directory (on the temp dir's disk) and moto
// over S3:
//
//	go test ./dedup -run '^$' -bench Handover -benchtime 5x
//
// The ratio sub-benchmarks run the three in every iteration, rotating their order, and compare
// best times (handover-x-vs-copy 1.0 = as fast as copying the bytes through the store).
func BenchmarkHandover(b *testing.B) {
	stores := []struct {
		name string
		open func(b *testing.B) checkpoint.Backend
	}{
		{"dir", func(b *testing.B) checkpoint.Backend {
			be, err := checkpoint.NewDirBackend(b.TempDir())
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
		{"moto", func(b *testing.B) checkpoint.Backend {
			m := s3test.StartMoto(b)
			m.CreateBucket(b, "handover")
			be, err := checkpoint.NewS3Backend(context.Background(), checkpoint.Location{Scheme: checkpoint.SchemeS3, Bucket: "handover", Prefix: "bench/"}, checkpoint.S3Options{
				Endpoint: m.Endpoint(), Region: "eu-west-1", AccessKeyID: "test", SecretAccessKey: "test"})
			if err != nil {
				b.Fatal(err)
			}
			return be
		}},
	}
	for _, st := range stores {
		b.Run("store="+st.name, func(b *testing.B) {
			benchHandover(b, st.open(b))
		})
	}
}

func benchHandover(b *testing.B, be checkpoint.Backend) {
	store := checkpoint.NewStore(be, 2)
	ctx := context.Background()
	sizing, err := window.Size(handoverWindow)
	if err != nil {
		b.Fatal(err)
	}
	size := int64(sizing.TotalBytes)
	cfg := Config{Window: handoverWindow, Topic: "bench", Persister: NewCheckpointPersister(store, slog.New(slog.DiscardHandler)),
		Logger: slog.New(slog.DiscardHandler)}
	newSet := func() *Set {
		s, err := NewSet(ctx, cfg)
		if err != nil {
			b.Fatal(err)
		}
		return s
	}
	// The replica that owns the partition between iterations: its filter holds 200k identities.
	owner := newSet()
	if err := owner.Assign(ctx, 0); err != nil {
		b.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 200_000 {
		owner.Seen(0, []byte{byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), byte(rng.Uint32()), 1, 2, 3}, time.Time{})
	}
	handover := func() {
		next := newSet()
		if err := owner.Revoke(ctx, 0); err != nil {
			b.Fatal(err)
		}
		if err := next.Assign(ctx, 0); err != nil {
			b.Fatal(err)
		}
		owner.Close(ctx)
		owner = next
	}
	retained := func() {
		if err := owner.Revoke(ctx, 0); err != nil {
			b.Fatal(err)
		}
		owner.Generation(1, []int32{0}, nil)
		if err := owner.Assign(ctx, 0); err != nil {
			b.Fatal(err)
		}
	}
	raw := make([]byte, size)
	for i := range raw {
		raw[i] = byte(rng.Uint32())
	}
	buf := make([]byte, size)
	copyBytes := func() {
		const name = "plain.00000000000000000001.snap" // replaced by every copy
		if _, err := be.Create(ctx, name, func(w io.Writer) error {
			_, err := io.Copy(w, bytes.NewReader(raw))
			return err
		}); err != nil {
			b.Fatal(err)
		}
		r, err := be.Open(ctx, name)
		if err != nil {
			b.Fatal(err)
		}
		defer r.Close()
		if _, err := io.ReadFull(r, buf); err != nil {
			b.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		fn   func()
	}{{"handover", handover}, {"retained", retained}, {"baseline-copy", copyBytes}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			b.SetBytes(size)
			for b.Loop() {
				c.fn()
			}
		})
	}
	b.Run("ratio", func(b *testing.B) {
		fns := map[string]func(){"handover": handover, "retained": retained, "copy": copyBytes}
		best := bestTimes(b, []string{"handover", "retained", "copy"}, fns)
		b.ReportMetric(float64(best["handover"])/float64(best["copy"]), "handover-x-vs-copy")
		b.ReportMetric(float64(best["retained"])/float64(best["copy"]), "retained-x-vs-copy")
	})
	owner.Close(ctx)
}

// bestTimes runs fns as ckpttest.BestTimes does, and reports and returns each one's best time.
func bestTimes(b *testing.B, names []string, fns map[string]func()) map[string]time.Duration {
	best := ckpttest.BestTimes(b, names, fns)
	for _, n := range names {
		b.ReportMetric(best[n].Seconds()*1e3, n+"-ms")
	}
	return best
}
