package dedup

import (
	"bytes"
	"context"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/window"
)

var (
	signKey  = bytes.Repeat([]byte("k"), 32)
	otherKey = bytes.Repeat([]byte("o"), 32)
)

// signFixture is a store holding one honest checkpoint of unit, signed with signKey, of a filter
// that saw key-0..key-99.
type signFixture struct {
	store *checkpoint.Store
	dir   string
	cfg   window.Config
	f     *window.Filter
	p     *CheckpointPersister
}

const signUnit = "orders.p0"

func newSignFixture(t *testing.T) *signFixture {
	t.Helper()
	store, dir := dirStore(t)
	cfg, f := trustFilter(t, 0)
	fx := &signFixture{store: store, dir: dir, cfg: cfg, f: f, p: fx0(store, signKey)}
	fx.add(0, 100)
	fx.save(t, fx.p)
	return fx
}

func fx0(store *checkpoint.Store, key []byte) *CheckpointPersister {
	p := NewCheckpointPersister(store, slog.New(slog.DiscardHandler))
	if key != nil {
		p.WithSigningKey(key)
	}
	return p
}

func (fx *signFixture) add(from, to int) {
	for i := from; i < to; i++ {
		fx.f.TestAndAdd([]byte("key-" + strconv.Itoa(i)))
	}
}

func (fx *signFixture) save(t *testing.T, p *CheckpointPersister) {
	t.Helper()
	info := SnapshotInfo{Scope: ScopePartition, Topic: "orders", Partition: 0, InputOffsets: map[int32]int64{0: 1}}
	if _, _, err := p.Save(context.Background(), signUnit, fx.f, info, func(context.Context) error { return nil }); err != nil {
		t.Fatal(err)
	}
}

// restore restores with signKey and returns the outcome and the reasons counted.
func (fx *signFixture) restore(t *testing.T) (*window.Filter, checkpoint.Outcome, []string) {
	t.Helper()
	p := fx0(fx.store, signKey)
	var reasons []string
	p.OnRejected(func(r string) { reasons = append(reasons, r) })
	f, res, err := p.Restore(context.Background(), signUnit, fx.cfg)
	if err != nil {
		t.Fatal(err)
	}
	return f, res.Outcome, reasons
}

// genObjects returns the paths of the unit's generation objects, sorted.
func (fx *signFixture) genObjects(t *testing.T) []string {
	t.Helper()
	var out []string
	err := filepath.WalkDir(fx.dir, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(path, ".gen") {
			out = append(out, path)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	slices.Sort(out)
	return out
}

func TestSignedRoundTrip(t *testing.T) {
	fx := newSignFixture(t)
	r, outcome, reasons := fx.restore(t)
	if r == nil || outcome != checkpoint.OutcomeWarm || len(reasons) != 0 {
		t.Fatalf("restore: filter %v, outcome %q, rejections %v; want warm", r != nil, outcome, reasons)
	}
	for i := range 100 {
		if !r.Test([]byte("key-" + strconv.Itoa(i))) {
			t.Fatalf("key %d lost", i)
		}
	}
}

// TestSignedRestoreRejects puts above the honest signed checkpoint one that the key did not
// sign (another key, no key) or whose generation object was swapped for another valid one: each
// is rejected with its reason, and the restore falls back to the honest checkpoint.
func TestSignedRestoreRejects(t *testing.T) {
	tests := []struct {
		name   string
		forge  func(t *testing.T, fx *signFixture)
		reason string
	}{
		{"another key", func(t *testing.T, fx *signFixture) { fx.save(t, fx0(fx.store, otherKey)) }, RejectBadSignature},
		{"unsigned", func(t *testing.T, fx *signFixture) { fx.save(t, fx0(fx.store, nil)) }, RejectUnsigned},
		{"swapped generation", func(t *testing.T, fx *signFixture) {
			before := fx.genObjects(t)
			fx.save(t, fx.p)
			after := fx.genObjects(t)
			added := slices.DeleteFunc(slices.Clone(after), func(s string) bool { return slices.Contains(before, s) })
			if len(added) != 1 || len(before) == 0 {
				t.Fatalf("objects before %v, after %v", before, after)
			}
			// The new checkpoint's current generation, replaced by the honest checkpoint's
			// object of the same generation: a valid object, but not the one signed.
			old, err := os.ReadFile(before[len(before)-1])
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(added[0], old, 0o644); err != nil {
				t.Fatal(err)
			}
		}, ""},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fx := newSignFixture(t)
			fx.add(100, 200)
			tc.forge(t, fx)
			r, outcome, reasons := fx.restore(t)
			if r == nil || outcome != checkpoint.OutcomeFallback || len(reasons) != 1 {
				t.Fatalf("restore: filter %v, outcome %q, rejections %v; want a fallback after one rejection", r != nil, outcome, reasons)
			}
			t.Logf("rejected as %v", reasons)
			if tc.reason != "" && reasons[0] != tc.reason {
				t.Errorf("rejected as %q, want %q", reasons[0], tc.reason)
			}
			for i := range 100 {
				if !r.Test([]byte("key-" + strconv.Itoa(i))) {
					t.Fatalf("key %d of the honest checkpoint lost", i)
				}
			}
		})
	}
}
