package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/internal/ckpttest"
)

// An incremental checkpoint in these tests: generations numbered by the test, each with its own
// words (ckpttest.Words of the generation's seed); a generation whose seed did not change since
// the last save is referenced again, the others are written.

const testGroups = 40 // 320 words per generation

// ckpt is a checkpoint the tests save: generation number → the seed of its words.
type ckpt map[uint64]uint64

// incrHeader returns a manifest header for the generations of c (newest first), without refs.
func incrHeader(c ckpt) snapshot.Header {
	h := testHeader(testGroups)
	nums := slices.Sorted(maps.Keys(c))
	slices.Reverse(nums)
	h.Generations, h.Epoch, h.Gens = max(len(nums), 1), nums[0], nil
	for i, n := range nums {
		h.Gens = append(h.Gens, snapshot.Generation{Number: n, Slot: i})
	}
	return h
}

func genWordsOf(seed uint64) []uint64 { return ckpttest.Words(testGroups*8, seed) }

// saver saves ckpts incrementally, as dedup's persister does: it remembers what its last
// committed manifest referenced.
type saver struct {
	s     *Store
	unit  string
	epoch uint64 // the manifests' owner epoch
	base  map[uint64]snapshot.GenRef
	seed  map[uint64]uint64
}

func newSaver(s *Store) *saver { return &saver{s: s, unit: "u"} }

func (sv *saver) save(c ckpt, beforeCommit func(tx *Txn) error) (Info, SaveStats, error) {
	h := incrHeader(c)
	info, st, err := sv.s.SaveSet(context.Background(), sv.unit, func(tx *Txn) ([]byte, error) {
		for _, g := range h.Gens {
			ref, ok := sv.base[g.Number]
			if _, exists := tx.Exists(ref.Object); ok && exists && sv.seed[g.Number] == c[g.Number] {
				h.Refs = append(h.Refs, ref)
				continue
			}
			ref, err := createGen(tx, g.Number, genWordsOf(c[g.Number]))
			if err != nil {
				return nil, err
			}
			h.Refs = append(h.Refs, ref)
		}
		if beforeCommit != nil {
			if err := beforeCommit(tx); err != nil {
				return nil, err
			}
		}
		var b bytes.Buffer
		h.OwnerEpoch = sv.epoch
		err := snapshot.EncodeManifest(&b, h)
		return b.Bytes(), err
	})
	if err == nil || errors.Is(err, ErrPrune) {
		sv.base, sv.seed = map[uint64]snapshot.GenRef{}, maps.Clone(c)
		for i, g := range h.Gens {
			sv.base[g.Number] = h.Refs[i]
		}
	}
	return info, st, err
}

func createGen(tx *Txn, gen uint64, words []uint64) (snapshot.GenRef, error) {
	var sum uint32
	obj, err := tx.Create(func(w io.Writer) error {
		e, err := snapshot.NewGenEncoder(w, snapshot.GenHeader{Generation: gen, Sections: []uint64{uint64(len(words))}})
		if err != nil {
			return err
		}
		if err := e.WriteWords(words); err != nil {
			return err
		}
		err = e.Close()
		sum = e.Checksum()
		return err
	})
	return snapshot.GenRef{Object: obj.Name, Size: obj.Size, Checksum: sum}, err
}

// loadCkpt loads unit "u" and returns which seeds its generations' words came from.
func loadCkpt(s *Store) (ckpt, LoadResult, error) {
	ctx := context.Background()
	return Load(ctx, s, "u", func(h snapshot.Header, d *snapshot.Decoder) (ckpt, error) {
		c := ckpt{}
		for i, g := range h.Gens {
			r, err := s.OpenGeneration(ctx, "u", h.Refs[i], g.Number, []uint64{testGroups * 8})
			if err != nil {
				return nil, err
			}
			words := make([]uint64, testGroups*8)
			err = r.ReadWords(words)
			r.Close()
			if err != nil {
				return nil, err
			}
			c[g.Number] = seedOf(words)
		}
		return c, nil
	})
}

// seedOf finds which seed (below 100) generated words.
func seedOf(words []uint64) uint64 {
	for seed := range uint64(100) {
		if slices.Equal(words, genWordsOf(seed)) {
			return seed
		}
	}
	return 999
}

func TestIncrementalContract(t *testing.T) {
	tests := []struct {
		name string
		run  func(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest)
	}{
		{"writes what changed", contractIncremental},
		{"failed save leaves nothing", contractIncrementalFailed},
		{"damaged generation falls back", contractIncrementalFallback},
		{"saves of other replicas", contractIncrementalReplicas},
		{"owner epochs fence", contractOwnerEpochs},
	}
	for _, kind := range storeKinds(t) {
		t.Run(kind.name, func(t *testing.T) {
			for _, tc := range tests {
				t.Run(tc.name, func(t *testing.T) { tc.run(t, kind.open) })
			}
		})
	}
}

// contractIncremental saves a rotating window of three generations: each save writes the
// changed generations only, every checkpoint loads whole, and the store holds exactly the kept
// manifests and the objects they reference.
func contractIncremental(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest) {
	s := open(t, 2)
	sv := newSaver(s.Store)
	steps := []struct {
		c             ckpt
		created, kept int
	}{
		{ckpt{1: 10}, 1, 0},
		{ckpt{1: 11}, 1, 0},               // the current generation changed
		{ckpt{2: 20, 1: 11}, 1, 1},        // rotation: generation 1 sealed, reused
		{ckpt{2: 20, 1: 11}, 0, 2},        // nothing changed: a manifest only
		{ckpt{3: 30, 2: 21, 1: 11}, 2, 1}, // rotation; generation 2 completed
		{ckpt{4: 40, 3: 30, 2: 21}, 1, 2}, // generation 1 expired
	}
	for i, st := range steps {
		info, stats, err := sv.save(st.c, nil)
		if err != nil {
			t.Fatalf("save %d: %v", i, err)
		}
		if stats.Created != st.created || stats.Reused != st.kept || stats.Written < info.Size {
			t.Fatalf("save %d: stats %+v, want %d created, %d reused", i, stats, st.created, st.kept)
		}
		got, res, err := loadCkpt(s.Store)
		if err != nil || res.Outcome != OutcomeWarm || !maps.Equal(got, st.c) {
			t.Fatalf("save %d: loaded %v (%s, %v), want %v", i, got, res.Outcome, err, st.c)
		}
		checkReferenced(t, s)
	}
}

// checkReferenced checks that the store holds its kept manifests and the objects they reference,
// nothing else and no partial write.
func checkReferenced(t *testing.T, s *storeUnderTest) {
	t.Helper()
	ctx := context.Background()
	infos, err := s.List(ctx, "u")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{}
	for _, info := range infos {
		want[info.Name] = true
		m, err := s.meta(ctx, info)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range m.refs {
			want[r] = true
		}
	}
	names, partial := s.contents(t)
	if partial != 0 || !slices.Equal(names, slices.Sorted(maps.Keys(want))) {
		t.Fatalf("store holds %v (%d partial), want %v", names, partial, slices.Sorted(maps.Keys(want)))
	}
}

// contractIncrementalFailed fails saves after they created objects, and with a manifest that
// names an object that does not exist: nothing is committed and nothing is left.
func contractIncrementalFailed(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest) {
	s := open(t, 2)
	sv := newSaver(s.Store)
	if _, _, err := sv.save(ckpt{2: 20, 1: 10}, nil); err != nil {
		t.Fatal(err)
	}
	before, _ := s.contents(t)
	boom := errors.New("seal timed out")
	_, stats, err := sv.save(ckpt{2: 21, 1: 10}, func(*Txn) error { return boom })
	if !errors.Is(err, boom) || stats.Created != 1 || stats.Written == 0 {
		t.Fatalf("save = %v, %+v; want the build's error after one object", err, stats)
	}
	_, _, err = s.SaveSet(context.Background(), "u", func(tx *Txn) ([]byte, error) {
		h := incrHeader(ckpt{2: 22, 1: 10})
		h.Refs = []snapshot.GenRef{{Object: "u.00000000000000000001.zzzz.gen", Size: 100}, {Object: "u.00000000000000000001.yyyy.gen", Size: 100}}
		var b bytes.Buffer
		err := snapshot.EncodeManifest(&b, h)
		return b.Bytes(), err
	})
	if err == nil || !strings.Contains(err.Error(), "references") {
		t.Fatalf("manifest with dangling references: %v", err)
	}
	if after, partial := s.contents(t); !slices.Equal(after, before) || partial != 0 {
		t.Fatalf("failed saves left %v (%d partial), want %v", after, partial, before)
	}
	if got, _, err := loadCkpt(s.Store); err != nil || !maps.Equal(got, ckpt{2: 20, 1: 10}) {
		t.Fatalf("load = %v, %v", got, err)
	}
}

// contractIncrementalFallback damages generation objects: a damaged or missing object makes its
// manifests unusable, and Load falls back to the newest manifest that does not reference it.
func contractIncrementalFallback(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest) {
	s := open(t, 3)
	sv := newSaver(s.Store)
	for _, c := range []ckpt{{2: 20, 1: 10}, {2: 21, 1: 10}} {
		if _, _, err := sv.save(c, nil); err != nil {
			t.Fatal(err)
		}
	}
	newest := sv.base[2].Object
	valid, _ := readObject(t, s, newest)
	for name, bad := range map[string][]byte{
		"flipped bit":    flipByte(len(valid) / 2)(bytes.Clone(valid)),
		"truncated":      valid[:len(valid)-9],
		"other content":  validOther(t),
		"not a gen file": []byte("hello"),
	} {
		s.plant(t, newest, bad)
		got, res, err := loadCkpt(s.Store)
		if err != nil || res.Outcome != OutcomeFallback || !maps.Equal(got, ckpt{2: 20, 1: 10}) || len(res.Failures) != 1 ||
			!errors.Is(res.Failures[0].Err, snapshot.ErrCorrupt) && !errors.Is(res.Failures[0].Err, snapshot.ErrNotSnapshot) {
			t.Fatalf("%s: load = %v (%s, failures %v), %v; want the older checkpoint", name, got, res.Outcome, res.Failures, err)
		}
	}
	if err := s.b.Delete(context.Background(), sv.base[1].Object); err != nil { // shared by both
		t.Fatal(err)
	}
	got, res, err := loadCkpt(s.Store)
	if err != nil || res.Outcome != OutcomeCold || got != nil || len(res.Failures) != 2 || !errors.Is(res.Err(), fs.ErrNotExist) {
		t.Fatalf("shared object missing: load = %v (%s, %v), %v; want cold", got, res.Outcome, res.Err(), err)
	}
}

func readObject(t *testing.T, s *storeUnderTest, name string) ([]byte, error) {
	t.Helper()
	r, err := s.b.Open(context.Background(), name)
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	return io.ReadAll(r)
}

// validOther returns a valid generation object of generation 2 with other words than the one the
// newest manifest references.
func validOther(t *testing.T) []byte {
	var b bytes.Buffer
	words := genWordsOf(55)
	e, err := snapshot.NewGenEncoder(&b, snapshot.GenHeader{Generation: 2, Sections: []uint64{uint64(len(words))}})
	if err != nil {
		t.Fatal(err)
	}
	if err := e.WriteWords(words); err != nil {
		t.Fatal(err)
	}
	if err := e.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// contractIncrementalReplicas checks pruning against other processes: a replica that never read
// a manifest prunes by its references too, and objects of a save under way elsewhere (numbered
// above the kept manifests) survive prunes until enough newer manifests exist.
func contractIncrementalReplicas(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest) {
	s := open(t, 2)
	a := newSaver(s.Store)
	if _, _, err := a.save(ckpt{2: 20, 1: 10}, nil); err != nil {
		t.Fatal(err)
	}
	b := newSaver(s.replica(t))
	b.base, b.seed = a.base, a.seed // b restored a's checkpoint: it references a's objects
	if _, _, err := b.save(ckpt{3: 30, 2: 20, 1: 10}, nil); err != nil {
		t.Fatal(err)
	}
	checkReferenced(t, s)
	inflight := genName("u", uint64(time.Now().Add(time.Hour).UnixNano()), "abcd")
	s.plant(t, inflight, []byte("a save under way"))
	if _, _, err := a.save(ckpt{3: 31, 2: 20}, nil); err != nil {
		t.Fatal(err)
	}
	if names, _ := s.contents(t); !slices.Contains(names, inflight) {
		t.Fatal("the object of a save under way, numbered above every manifest, was pruned")
	}
	if got, _, err := loadCkpt(s.Store); err != nil || !maps.Equal(got, ckpt{3: 31, 2: 20}) {
		t.Fatalf("load = %v, %v", got, err)
	}
}

// contractOwnerEpochs: a replica that lost the unit (owner epoch 5) to another (epoch 9) cannot
// save over it once it lists the newer owner's manifest; a save of its that raced the handover
// and, with a clock ahead, got numbered after the newer owner's manifest is stale: its own prune
// deletes it, never the newer owner's, even with one snapshot kept, and a load restores the newer
// owner's.
func contractOwnerEpochs(t *testing.T, open func(t *testing.T, keep int) *storeUnderTest) {
	s := open(t, 1)
	zombie := newSaver(s.Store)
	zombie.epoch = 5
	if _, _, err := zombie.save(ckpt{1: 10}, nil); err != nil {
		t.Fatal(err)
	}
	owner := newSaver(s.replica(t))
	owner.epoch = 9
	owner.s.now = func() time.Time { return time.Now().Add(-time.Hour) } // its clock lags
	// The zombie's save lists the unit before the new owner saves, and commits after.
	var owners Info
	zinfo, _, err := zombie.save(ckpt{2: 20, 1: 10}, func(*Txn) error {
		var err error
		owners, _, err = owner.save(ckpt{2: 21, 1: 10}, nil)
		return err
	})
	if err != nil || zinfo.Seq <= owners.Seq {
		t.Fatalf("the racing save: %v, numbered %d after the owner's %d", err, zinfo.Seq, owners.Seq)
	}
	infos, err := s.List(context.Background(), "u")
	if err != nil || len(infos) != 1 || infos[0].Name != owners.Name {
		t.Fatalf("the unit lists %v, %v; want the new owner's manifest %s alone", infos, err, owners.Name)
	}
	if got, _, err := loadCkpt(s.Store); err != nil || !maps.Equal(got, ckpt{2: 21, 1: 10}) {
		t.Fatalf("load = %v, %v; want the new owner's checkpoint", got, err)
	}
	if _, _, err := zombie.save(ckpt{3: 30, 2: 20}, nil); !errors.Is(err, ErrFenced) {
		t.Fatalf("a save below the newest owner epoch: err = %v, want ErrFenced", err)
	}
	if _, _, err := owner.save(ckpt{3: 31, 2: 21}, nil); err != nil {
		t.Fatal(err)
	}
	if got, _, err := loadCkpt(s.Store); err != nil || !maps.Equal(got, ckpt{3: 31, 2: 21}) {
		t.Fatalf("load = %v, %v; want the new owner's latest checkpoint", got, err)
	}
}

// TestFence: a snapshot numbered after one of a higher owner epoch is stale; a prune keeps the
// newest Keep live snapshots and every snapshot of an epoch above its own.
func TestFence(t *testing.T) {
	mk := func(epochs ...uint64) []Info { // newest first
		infos := make([]Info, len(epochs))
		for i, e := range epochs {
			infos[i] = Info{Name: fmt.Sprintf("s%d", len(epochs)-i), Seq: uint64(len(epochs) - i), Epoch: e}
		}
		return infos
	}
	names := func(infos []Info) string {
		var out []string
		for _, i := range infos {
			out = append(out, i.Name)
		}
		return strings.Join(out, ",")
	}
	tests := []struct {
		epochs             []uint64
		own                uint64
		live, kept, pruned string
	}{
		{[]uint64{0, 0, 0}, 0, "s3,s2,s1", "s3,s2", "s1"},
		{[]uint64{9, 5, 5}, 9, "s3,s2,s1", "s3,s2", "s1"},
		{[]uint64{5, 9, 5}, 5, "s2,s1", "s2,s1", "s3"},
		{[]uint64{5, 9, 9, 9}, 5, "s3,s2,s1", "s3,s2,s1", "s4"},
		{[]uint64{7, 5, 9, 5}, 7, "s2,s1", "s2,s1", "s4,s3"},
		{[]uint64{9, 3, 7}, 9, "s3,s1", "s3,s1", "s2"},
	}
	s := &Store{keep: 2}
	for _, tc := range tests {
		infos := mk(tc.epochs...)
		live, _ := fence(infos)
		kept, gone := s.keptBy(infos, tc.own)
		if names(live) != tc.live || names(kept) != tc.kept || names(gone) != tc.pruned {
			t.Errorf("epochs %v (newest first), own %d: live %s, kept %s, pruned %s; want %s, %s, %s", tc.epochs, tc.own,
				names(live), names(kept), names(gone), tc.live, tc.kept, tc.pruned)
		}
	}
}
