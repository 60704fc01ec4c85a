package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/kdedup/kdedup/checkpoint/s3test"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/internal/tier"
)

// The store contract: the one Store policy passes the same table of tests over every Backend:
// DirBackend, MemBackend, S3Backend on the in-process fake and S3Backend on a moto_server process.

// storeUnderTest is one Store prepared for the contract tests.
type storeUnderTest struct {
	*Store
	// replica opens another store over the same location, as a second process would.
	replica func(t *testing.T) *Store
	// plant stores raw bytes under an object name, bypassing Save.
	plant func(t *testing.T, name string, data []byte)
	// contents lists every name at the location and counts partial writes (temporary files,
	// pending multipart uploads, Creates in progress).
	contents func(t *testing.T) (names []string, partial int)
}

type storeKind struct {
	name string
	open func(t *testing.T, keep int) *storeUnderTest
}

// storeKinds returns the kinds under test. The moto kind starts one moto_server for the calling
// test (skipped without moto unless KDEDUP_REQUIRE_MOTO=1) and gives every store its own bucket;
// it is of the integration tier, and left out unless that tier runs.
func storeKinds(t *testing.T) []storeKind {
	kinds := []storeKind{
		{"dir", openDirUnderTest},
		{"mem", openMemUnderTest},
		{"fakes3", func(t *testing.T, keep int) *storeUnderTest {
			fake := s3test.NewFake()
			t.Cleanup(fake.Close)
			fake.CreateBucket("snaps")
			return openS3UnderTest(t, fake.Endpoint(), "s3://snaps/kdedup/", keep, 64<<10)
		}},
	}
	if !tier.IntegrationRuns() {
		return kinds
	}
	var once sync.Once
	var moto *s3test.Moto
	var motoErr error
	var buckets atomic.Int64
	return append(kinds, storeKind{"moto", func(st *testing.T, keep int) *storeUnderTest {
		once.Do(func() {
			if moto, motoErr = s3test.NewMoto(); motoErr == nil {
				t.Cleanup(moto.Stop) // the calling test's, not this subtest's
			}
		})
		if motoErr != nil {
			s3test.Unavailable(st, motoErr)
		}
		bucket := fmt.Sprintf("contract-%d", buckets.Add(1))
		moto.CreateBucket(st, bucket)
		return openS3UnderTest(st, moto.Endpoint(), "s3://"+bucket+"/pre/fix", keep, 0)
	}})
}

func openDirUnderTest(t *testing.T, keep int) *storeUnderTest {
	dir := filepath.Join(t.TempDir(), "snaps")
	open := func(t *testing.T) *Store {
		b, err := NewDirBackend(dir)
		if err != nil {
			t.Fatal(err)
		}
		return NewStore(b, keep)
	}
	return &storeUnderTest{
		Store:   open(t),
		replica: open,
		plant: func(t *testing.T, name string, data []byte) {
			if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
				t.Fatal(err)
			}
		},
		contents: func(t *testing.T) ([]string, int) {
			var names []string
			partial := 0
			for _, n := range dirNames(t, dir) {
				if strings.HasSuffix(n, ".tmp") {
					partial++
					continue
				}
				names = append(names, n)
			}
			return names, partial
		},
	}
}

func openMemUnderTest(t *testing.T, keep int) *storeUnderTest {
	s, b := newMemStore(keep)
	return &storeUnderTest{
		Store:   s,
		replica: func(*testing.T) *Store { return NewStore(b, keep) },
		plant:   func(_ *testing.T, name string, data []byte) { b.Put(name, data) },
		contents: func(t *testing.T) ([]string, int) {
			objs, err := b.List(context.Background(), "")
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, o := range objs {
				names = append(names, o.Name)
			}
			slices.Sort(names)
			return names, b.Pending()
		},
	}
}

// dirNames lists the directory, sorted.
func dirNames(t *testing.T, dir string) []string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	return names
}

// testS3Options are the options of test stores: static dummy credentials (which must never show
// in errors) and two attempts per request.
func testS3Options(endpoint string) S3Options {
	return S3Options{Endpoint: endpoint, Region: "us-east-1", AccessKeyID: "AKIDKDEDUPTEST",
		SecretAccessKey: "kdedup-secret-never-in-errors", MaxAttempts: 2}
}

// newTestS3Backend opens an S3Backend on url at endpoint; partSize > 0 overrides the part size
// (below S3's minimum, for servers that allow it).
func newTestS3Backend(t testing.TB, endpoint, url string, partSize int) *S3Backend {
	t.Helper()
	loc, err := ParseURL(url)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewS3Backend(context.Background(), loc, testS3Options(endpoint))
	if err != nil {
		t.Fatal(err)
	}
	if partSize > 0 {
		b.partSize = partSize
	}
	// Retry at once: the tests inject failures, and the SDK's backoff of up to seconds would
	// only make them slow.
	b.client = s3.New(b.client.Options(), func(o *s3.Options) {
		o.Retryer = retry.AddWithMaxBackoffDelay(o.Retryer, time.Millisecond)
	})
	return b
}

func openS3UnderTest(t *testing.T, endpoint, url string, keep, partSize int) *storeUnderTest {
	b := newTestS3Backend(t, endpoint, url, partSize)
	return &storeUnderTest{
		Store:   NewStore(b, keep),
		replica: func(t *testing.T) *Store { return NewStore(newTestS3Backend(t, endpoint, url, partSize), keep) },
		plant: func(t *testing.T, name string, data []byte) {
			_, err := b.client.PutObject(context.Background(), &s3.PutObjectInput{
				Bucket: aws.String(b.loc.Bucket), Key: aws.String(b.key(name)), Body: bytes.NewReader(data),
			})
			if err != nil {
				t.Fatal(err)
			}
		},
		contents: func(t *testing.T) ([]string, int) { return s3Contents(t, b) },
	}
}

// s3Contents lists the backend's bucket (all of it, prefix stripped) and its pending multipart
// uploads.
func s3Contents(t *testing.T, b *S3Backend) ([]string, int) {
	t.Helper()
	ctx := context.Background()
	out, err := b.client.ListObjectsV2(ctx, &s3.ListObjectsV2Input{Bucket: aws.String(b.loc.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, o := range out.Contents {
		names = append(names, strings.TrimPrefix(aws.ToString(o.Key), b.loc.Prefix))
	}
	ups, err := b.client.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(b.loc.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(names)
	return names, len(ups.Uploads)
}

func TestStoreContract(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest)
	}{
		{"retention", contractRetention},
		{"failed save leaves nothing", contractFailedSave},
		{"sequence after a future snapshot", contractFutureSeq},
		{"units do not mix", contractUnits},
		{"open pruned", contractOpenPruned},
		{"invalid units", contractInvalidUnits},
		{"load falls back", contractLoadFallback},
		{"large snapshot streams", contractLarge},
		{"two replicas", contractReplicas},
		{"numbering", contractNumbering},
	}
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, kind.open) })
			}
		})
	}
}

func contractRetention(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	for _, tc := range []struct{ keep, saves, want int }{
		{keep: 0, saves: 5, want: DefaultKeep},
		{keep: 1, saves: 3, want: 1},
		{keep: 3, saves: 2, want: 2},
	} {
		t.Run(fmt.Sprintf("keep%d_saves%d", tc.keep, tc.saves), func(t *testing.T) {
			s := open(t, tc.keep)
			ctx := context.Background()
			var saved []Info
			for i := range tc.saves {
				body := fmt.Sprintf("snapshot %d", i)
				info, err := s.Save(ctx, "orders.p3", writeString(body))
				if err != nil {
					t.Fatal(err)
				}
				if len(saved) > 0 && info.Seq <= saved[len(saved)-1].Seq {
					t.Fatalf("seq %d not above previous %d", info.Seq, saved[len(saved)-1].Seq)
				}
				if info.Size != int64(len(body)) || info.Unit != "orders.p3" {
					t.Fatalf("info = %+v", info)
				}
				saved = append(saved, info)
			}
			list, err := s.List(ctx, "orders.p3")
			if err != nil {
				t.Fatal(err)
			}
			if len(list) != tc.want {
				t.Fatalf("List has %d snapshots, want %d", len(list), tc.want)
			}
			var wantNames []string
			for i, info := range list {
				want := saved[len(saved)-1-i]
				if info.Name != want.Name || info.Seq != want.Seq || info.Size != want.Size {
					t.Errorf("list[%d] = %+v, want %+v", i, info, want)
				}
				if got := readAll(t, s.Store, info); got != fmt.Sprintf("snapshot %d", tc.saves-1-i) {
					t.Errorf("list[%d] holds %q", i, got)
				}
				wantNames = append(wantNames, info.Name)
			}
			slices.Sort(wantNames)
			if names, partial := s.contents(t); !slices.Equal(names, wantNames) || partial != 0 {
				t.Errorf("location holds %v and %d partial writes, want exactly %v", names, partial, wantNames)
			}
		})
	}
}

func contractFailedSave(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	errWrite := errors.New("filter went away")
	tests := []struct {
		name    string
		write   func(cancel func()) func(io.Writer) error
		wantErr error
	}{
		{"write error after data", func(func()) func(io.Writer) error {
			return func(w io.Writer) error {
				_, _ = w.Write(make([]byte, 3<<20))
				return errWrite
			}
		}, errWrite},
		{"write error before data", func(func()) func(io.Writer) error {
			return func(io.Writer) error { return errWrite }
		}, errWrite},
		{"cancelled during write", func(cancel func()) func(io.Writer) error {
			return func(w io.Writer) error {
				if _, err := w.Write(make([]byte, 1<<20)); err != nil {
					return err
				}
				cancel()
				_, err := w.Write(make([]byte, 3<<20))
				return err
			}
		}, context.Canceled},
		{"cancelled, write ignores errors", func(cancel func()) func(io.Writer) error {
			return func(w io.Writer) error {
				cancel()
				_, _ = w.Write(make([]byte, 10))
				return nil
			}
		}, context.Canceled},
		{"encode with bad data length", func(func()) func(io.Writer) error {
			h := testHeader(1)
			return func(w io.Writer) error {
				return snapshottest.Encode(w, h, func(w io.Writer) error { return snapshottest.WriteWords(w, make([]uint64, h.Words-1)) })
			}
		}, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, 3)
			prev, err := s.Save(context.Background(), "u", writeString("previous"))
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			_, err = s.Save(ctx, "u", tc.write(cancel))
			if err == nil || (tc.wantErr != nil && !errors.Is(err, tc.wantErr)) {
				t.Fatalf("Save = %v, want %v", err, tc.wantErr)
			}
			expectOnly(t, s, "u", prev)
			if got := readAll(t, s.Store, prev); got != "previous" {
				t.Fatalf("previous snapshot now holds %q", got)
			}
		})
	}
}

// expectOnly checks that unit's only snapshot is want and that nothing else,
// complete or partial, is at the location.
func expectOnly(t *testing.T, s *storeUnderTest, unit string, want Info) {
	t.Helper()
	list, err := s.List(context.Background(), unit)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 || list[0].Name != want.Name || list[0].Size != want.Size {
		t.Fatalf("List = %+v, want only %+v", list, want)
	}
	if names, partial := s.contents(t); !slices.Equal(names, []string{want.Name}) || partial != 0 {
		t.Fatalf("location holds %v and %d partial writes, want only %s", names, partial, want.Name)
	}
}

func contractFutureSeq(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	// A snapshot from a replica whose clock ran a day ahead: the next save
	// must still sort as newest.
	s := open(t, 3)
	future := uint64(time.Now().Add(24 * time.Hour).UnixNano())
	s.plant(t, snapName("u", future), []byte("ahead"))
	info, err := s.Save(context.Background(), "u", writeString("new"))
	if err != nil {
		t.Fatal(err)
	}
	if info.Seq != future+1 {
		t.Fatalf("Seq = %d, want %d", info.Seq, future+1)
	}
	list, err := s.List(context.Background(), "u")
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 2 || list[0].Name != info.Name {
		t.Fatalf("List = %+v, want the new save first", list)
	}
}

func contractUnits(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	s := open(t, 1)
	ctx := context.Background()
	units := []string{"orders", "orders.p3", "orders.p30", "orders.p3.x"}
	for range 2 {
		for _, u := range units {
			if _, err := s.Save(ctx, u, writeString(u)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, u := range units {
		list, err := s.List(ctx, u)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 1 || readAll(t, s.Store, list[0]) != u {
			t.Errorf("unit %s: List = %+v", u, list)
			continue
		}
		if _, err := s.Open(ctx, Info{Unit: u, Name: list[0].Name + "x"}); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Open of a non-snapshot name = %v, want ErrBadUnit", err)
		}
	}
	if _, err := s.Open(ctx, Info{Unit: "orders", Name: snapName("orders.p3", 1)}); !errors.Is(err, ErrBadUnit) {
		t.Errorf("Open of another unit's snapshot = %v, want ErrBadUnit", err)
	}
	if names, _ := s.contents(t); len(names) != len(units) {
		t.Errorf("location holds %v", names)
	}
}

func contractOpenPruned(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	s := open(t, 1)
	ctx := context.Background()
	first, err := s.Save(ctx, "u", writeString("1"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Save(ctx, "u", writeString("2")); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Open(ctx, first); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("Open of a pruned snapshot = %v, want fs.ErrNotExist", err)
	}
}

func contractInvalidUnits(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	s := open(t, 0)
	ctx := context.Background()
	for _, unit := range []string{"", ".hidden", "a/b", "../etc", "a b", strings.Repeat("x", maxUnitLen+1)} {
		if _, err := s.Save(ctx, unit, writeString("x")); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Save(%q) = %v", unit, err)
		}
		if _, err := s.List(ctx, unit); !errors.Is(err, ErrBadUnit) {
			t.Errorf("List(%q) = %v", unit, err)
		}
		if err := s.Prune(ctx, unit); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Prune(%q) = %v", unit, err)
		}
		if _, err := s.Open(ctx, Info{Unit: unit, Name: unit + ".00000000000000000001.snap"}); !errors.Is(err, ErrBadUnit) {
			t.Errorf("Open(%q) = %v", unit, err)
		}
	}
}

func contractLoadFallback(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	ctx := context.Background()
	for _, tc := range []struct {
		name   string
		damage func(good []byte) []byte
	}{
		{"corrupt", func(b []byte) []byte { c := slices.Clone(b); c[len(c)/2] ^= 1; return c }},
		{"truncated", func(b []byte) []byte { return b[:len(b)-9] }},
		{"empty", func([]byte) []byte { return nil }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := open(t, 3)
			write, words := encodeSnap(2, 7)
			good, err := s.Save(ctx, "u", write)
			if err != nil {
				t.Fatal(err)
			}
			var buf bytes.Buffer
			if err := write(&buf); err != nil {
				t.Fatal(err)
			}
			s.plant(t, snapName("u", good.Seq+1), tc.damage(buf.Bytes()))
			got, res, err := Load(ctx, s.Store, "u", consumeWords(testHeader(2).Seed))
			if err != nil {
				t.Fatal(err)
			}
			if res.Outcome != OutcomeFallback || res.Snapshot.Name != good.Name || len(res.Failures) != 1 {
				t.Fatalf("Load = %s from %s with %d failures, want fallback to %s", res.Outcome, res.Snapshot.Name, len(res.Failures), good.Name)
			}
			if !errors.Is(res.Failures[0].Err, snapshot.ErrCorrupt) {
				t.Errorf("failure %v does not wrap ErrCorrupt", res.Failures[0].Err)
			}
			if !slices.Equal(got.words, words) {
				t.Error("restored words differ")
			}
		})
	}
}

func contractLarge(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	// 20 MiB: several parts at the default part size, hundreds on the fake.
	s := open(t, 2)
	ctx := context.Background()
	write, words := encodeSnap(20<<20/256, 11)
	info, err := s.Save(ctx, "big.p0", write)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size < 20<<20 {
		t.Fatalf("saved %d bytes", info.Size)
	}
	got, res, err := Load(ctx, s.Store, "big.p0", consumeWords(testHeader(1).Seed))
	if err != nil || res.Outcome != OutcomeWarm {
		t.Fatalf("Load = %v, %v", res.Outcome, err)
	}
	if !slices.Equal(got.words, words) {
		t.Fatal("restored words differ")
	}
	if _, partial := s.contents(t); partial != 0 {
		t.Fatalf("%d partial writes left", partial)
	}
}

func contractReplicas(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	s := open(t, 2)
	stores := []*Store{s.Store, s.replica(t)}
	ctx := context.Background()
	const units, saves = 3, 4
	var wg sync.WaitGroup
	errs := make(chan error, 64)
	for u := range units {
		for _, st := range stores {
			for range 2 { // two writers per unit per store
				wg.Go(func() {
					unit := fmt.Sprintf("topic.p%d", u)
					for i := range saves {
						write, _ := encodeSnap(4, uint64(u*1000+i))
						if _, err := st.Save(ctx, unit, write); err != nil && !errors.Is(err, ErrPrune) {
							errs <- err
							return
						}
					}
				})
			}
		}
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	for u := range units {
		unit := fmt.Sprintf("topic.p%d", u)
		if err := s.Prune(ctx, unit); err != nil {
			t.Fatal(err)
		}
		list, err := s.List(ctx, unit)
		if err != nil {
			t.Fatal(err)
		}
		if len(list) != 2 {
			t.Errorf("%s: %d snapshots after prune, want 2", unit, len(list))
		}
		for _, info := range list {
			rc, err := s.Open(ctx, info)
			if err != nil {
				t.Fatal(err)
			}
			if err := verify(rc); err != nil {
				t.Errorf("%s: %v", info.Name, err)
			}
			rc.Close()
		}
	}
	if _, partial := s.contents(t); partial != 0 {
		t.Errorf("%d partial writes left", partial)
	}
}

// contractNumbering checks what Info.Seq guarantees: numbers increase with every save of a
// store even when its clock stands still or goes back, across a restart (a new Store over the
// location whose clock is behind the old one's), and across replicas sharing the location whose
// clocks disagree by a day.
func contractNumbering(t *testing.T, open func(*testing.T, int) *storeUnderTest) {
	ctx := context.Background()
	s := open(t, 2)
	base := time.Now()
	at := func(st *Store, tm time.Time) { st.now = func() time.Time { return tm } }
	var last uint64
	save := func(st *Store, what string) {
		t.Helper()
		info, err := st.Save(ctx, "u", writeString(what))
		if err != nil {
			t.Fatal(err)
		}
		if info.Seq <= last {
			t.Fatalf("%s: Seq %d not above the previous %d", what, info.Seq, last)
		}
		last = info.Seq
		if list, err := st.List(ctx, "u"); err != nil || list[0].Name != info.Name {
			t.Fatalf("%s: List = %v, %v; want %s first", what, list, err, info.Name)
		}
	}
	at(s.Store, base)
	save(s.Store, "first")
	save(s.Store, "same clock")
	at(s.Store, base.Add(-time.Hour))
	save(s.Store, "clock went back")
	restarted := s.replica(t)
	at(restarted, base.Add(-2*time.Hour))
	save(restarted, "after a restart with a clock behind")
	lagging, ahead := s.replica(t), s.replica(t)
	at(lagging, base.Add(-24*time.Hour))
	at(ahead, base.Add(24*time.Hour))
	for i := range 3 {
		save(ahead, fmt.Sprintf("replica ahead %d", i))
		save(lagging, fmt.Sprintf("replica lagging %d", i))
	}
}
