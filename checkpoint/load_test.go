package checkpoint

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"slices"
	"testing"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/checkpoint/snapshot/snapshottest"
	"github.com/kdedup/kdedup/internal/ckpttest"
)

// restored is what the test consume functions build.
type restored struct {
	seed  uint64
	words []uint64
}

// consumeWords is a consume function in the style dedup will use: check the
// configuration, allocate, read.
func consumeWords(wantSeed uint64) func(h snapshot.Header, d *snapshot.Decoder) (restored, error) {
	return func(h snapshot.Header, d *snapshot.Decoder) (restored, error) {
		if h.Seed != wantSeed {
			return restored{}, fmt.Errorf("%w: seed %x, configured %x", ErrIncompatible, h.Seed, wantSeed)
		}
		words := make([]uint64, h.Words)
		if err := snapshottest.ReadWords(d, words); err != nil {
			return restored{}, fmt.Errorf("reading filter: %w", err)
		}
		return restored{seed: h.Seed, words: words}, nil
	}
}

// consumeViaReader reads the data the way window.Restore would: exactly the
// declared bytes through io.ReadFull, never seeing the checksum result.
func consumeViaReader(h snapshot.Header, d *snapshot.Decoder) (restored, error) {
	buf := make([]byte, h.DataBytes())
	if _, err := io.ReadFull(d, buf); err != nil {
		return restored{}, fmt.Errorf("restore: %w", err)
	}
	words := make([]uint64, h.Words)
	for i := range words {
		words[i] = binary.LittleEndian.Uint64(buf[8*i:])
	}
	return restored{seed: h.Seed, words: words}, nil
}

// saveSnap stores a snapshot of testHeader(2) with the given seed and word
// seed, returning its words.
func saveSnap(t *testing.T, s *Store, unit string, seed, wordSeed uint64) []uint64 {
	t.Helper()
	h := testHeader(2)
	h.Seed = seed
	words := ckpttest.Words(h.Words, wordSeed)
	_, err := s.Save(context.Background(), unit, func(w io.Writer) error {
		return snapshottest.Encode(w, h, func(w io.Writer) error { return snapshottest.WriteWords(w, words) })
	})
	if err != nil {
		t.Fatal(err)
	}
	return words
}

// memStore is a Store over the MemBackend b.
type memStore struct {
	*Store
	b *MemBackend
}

// damage rewrites the unit's n-th newest snapshot.
func damage(t *testing.T, s memStore, unit string, n int, f func([]byte) []byte) {
	t.Helper()
	list, err := s.List(context.Background(), unit)
	if err != nil || len(list) <= n {
		t.Fatalf("List = %v, %v", list, err)
	}
	s.b.Put(list[n].Name, f([]byte(readAll(t, s.Store, list[n]))))
}

func flipByte(off int) func([]byte) []byte {
	return func(b []byte) []byte {
		if off < 0 {
			off += len(b)
		}
		b[off] ^= 0x40
		return b
	}
}

func TestLoad(t *testing.T) {
	const seed = 77
	type setup func(t *testing.T, s memStore) (want []uint64)
	tests := []struct {
		name         string
		setup        setup
		consume      func(h snapshot.Header, d *snapshot.Decoder) (restored, error)
		wantOutcome  Outcome
		wantFailures []error
	}{
		{
			name:        "no snapshots",
			setup:       func(*testing.T, memStore) []uint64 { return nil },
			wantOutcome: OutcomeCold,
		},
		{
			name: "newest is good",
			setup: func(t *testing.T, s memStore) []uint64 {
				saveSnap(t, s.Store, "u", seed, 1)
				return saveSnap(t, s.Store, "u", seed, 2)
			},
			wantOutcome: OutcomeWarm,
		},
		{
			name: "newest has a bad data byte",
			setup: func(t *testing.T, s memStore) []uint64 {
				want := saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed, 2)
				damage(t, s, "u", 0, flipByte(-9))
				return want
			},
			wantOutcome:  OutcomeFallback,
			wantFailures: []error{snapshot.ErrCorrupt},
		},
		{
			name: "bad checksum, consumer reads via io.ReadFull",
			setup: func(t *testing.T, s memStore) []uint64 {
				want := saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed, 2)
				damage(t, s, "u", 0, flipByte(-1))
				return want
			},
			consume:      consumeViaReader,
			wantOutcome:  OutcomeFallback,
			wantFailures: []error{snapshot.ErrCorrupt},
		},
		{
			name: "newest truncated, next foreign, third good",
			setup: func(t *testing.T, s memStore) []uint64 {
				want := saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed, 2)
				saveSnap(t, s.Store, "u", seed, 3)
				damage(t, s, "u", 0, func(b []byte) []byte { return b[:len(b)/2] })
				damage(t, s, "u", 1, func([]byte) []byte { return []byte("PK\x03\x04 not a snapshot") })
				return want
			},
			wantOutcome:  OutcomeFallback,
			wantFailures: []error{snapshot.ErrCorrupt, snapshot.ErrNotSnapshot},
		},
		{
			name: "newest from a newer kdedup",
			setup: func(t *testing.T, s memStore) []uint64 {
				want := saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed, 2)
				damage(t, s, "u", 0, func(b []byte) []byte { b[8] = 9; return b })
				return want
			},
			wantOutcome:  OutcomeFallback,
			wantFailures: []error{snapshot.ErrUnknownVersion},
		},
		{
			name: "newest incompatible (other seed)",
			setup: func(t *testing.T, s memStore) []uint64 {
				want := saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed+1, 2)
				return want
			},
			wantOutcome:  OutcomeFallback,
			wantFailures: []error{ErrIncompatible},
		},
		{
			name: "all unusable",
			setup: func(t *testing.T, s memStore) []uint64 {
				saveSnap(t, s.Store, "u", seed, 1)
				saveSnap(t, s.Store, "u", seed+1, 2)
				damage(t, s, "u", 1, flipByte(30))
				return nil
			},
			wantOutcome:  OutcomeCold,
			wantFailures: []error{ErrIncompatible, snapshot.ErrCorrupt},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			st, b := newMemStore(3)
			s := memStore{st, b}
			want := tc.setup(t, s)
			consume := tc.consume
			if consume == nil {
				consume = consumeWords(seed)
			}
			got, res, err := Load(context.Background(), s.Store, "u", consume)
			if err != nil {
				t.Fatalf("Load: %v", err)
			}
			if res.Outcome != tc.wantOutcome {
				t.Errorf("Outcome = %s, want %s", res.Outcome, tc.wantOutcome)
			}
			if !slices.Equal(got.words, want) {
				t.Errorf("Load returned the wrong data (got %d words)", len(got.words))
			}
			if len(res.Failures) != len(tc.wantFailures) {
				t.Fatalf("Failures = %+v, want %v", res.Failures, tc.wantFailures)
			}
			for i, f := range res.Failures {
				if !errors.Is(f.Err, tc.wantFailures[i]) {
					t.Errorf("Failures[%d] = %v, want %v", i, f.Err, tc.wantFailures[i])
				}
			}
			switch {
			case res.Outcome == OutcomeCold && len(res.Failures) > 0:
				err := res.Err()
				if !errors.Is(err, ErrNoUsableSnapshot) {
					t.Errorf("Err() = %v, want ErrNoUsableSnapshot", err)
				}
				for _, w := range tc.wantFailures {
					if !errors.Is(err, w) {
						t.Errorf("Err() = %v, does not wrap %v", err, w)
					}
				}
			case res.Err() != nil:
				t.Errorf("Err() = %v, want nil", res.Err())
			}
			if res.Outcome != OutcomeCold && (res.Header.Seed != seed || res.Snapshot.Name == "") {
				t.Errorf("result header/snapshot not filled: %+v", res)
			}
		})
	}
}

// flakyBackend wraps a Backend, failing List or Open with a given error.
type flakyBackend struct {
	Backend
	listErr, openErr error
}

func (f flakyBackend) List(ctx context.Context, prefix string) ([]Object, error) {
	if f.listErr != nil {
		return nil, f.listErr
	}
	return f.Backend.List(ctx, prefix)
}

func (f flakyBackend) Open(ctx context.Context, name string) (ObjectReader, error) {
	if f.openErr != nil {
		return nil, f.openErr
	}
	return f.Backend.Open(ctx, name)
}

// TestLoadAborts covers errors that must not be mistaken for "no usable
// snapshot": Load returns them instead of starting cold.
func TestLoadAborts(t *testing.T) {
	errIO := errors.New("input/output error")
	errOOM := errors.New("cannot allocate")
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	tests := []struct {
		name    string
		ctx     context.Context
		wrap    func(Backend) Backend
		consume func(snapshot.Header, *snapshot.Decoder) (restored, error)
		want    error
	}{
		{"list fails", context.Background(), func(b Backend) Backend { return flakyBackend{Backend: b, listErr: errIO} }, nil, errIO},
		{"open fails", context.Background(), func(b Backend) Backend { return flakyBackend{Backend: b, openErr: errIO} }, nil, errIO},
		{"consume fails", context.Background(), nil, func(snapshot.Header, *snapshot.Decoder) (restored, error) { return restored{}, errOOM }, errOOM},
		{"context cancelled", cancelled, nil, nil, context.Canceled},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s, b := newMemStore(3)
			saveSnap(t, s, "u", 1, 1)
			if tc.wrap != nil {
				s = NewStore(tc.wrap(b), 3)
			}
			consume := tc.consume
			if consume == nil {
				consume = consumeWords(1)
			}
			got, res, err := Load(tc.ctx, s, "u", consume)
			if !errors.Is(err, tc.want) {
				t.Fatalf("Load = %v, want %v", err, tc.want)
			}
			if got.words != nil || res.Outcome == OutcomeWarm {
				t.Fatalf("Load returned data/outcome %s along with an error", res.Outcome)
			}
		})
	}
}

// TestLoadCancelledDuringRead cancels the context while the consumer reads:
// the read fails and Load reports the cancellation, not corruption.
func TestLoadCancelledDuringRead(t *testing.T) {
	s, _ := newMemStore(3)
	saveSnap(t, s, "u", 1, 1)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, res, err := Load(ctx, s, "u", func(h snapshot.Header, d *snapshot.Decoder) (restored, error) {
		cancel()
		words := make([]uint64, h.Words)
		if err := snapshottest.ReadWords(d, words); err != nil {
			return restored{}, fmt.Errorf("read: %w", err)
		}
		return restored{words: words}, nil
	})
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Load = %v (outcome %s), want context.Canceled", err, res.Outcome)
	}
}
