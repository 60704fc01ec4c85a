package dedup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"log/slog"
	"runtime"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/checkpoint"
	"github.com/kdedup/kdedup/checkpoint/snapshot"
	"github.com/kdedup/kdedup/window"
)

// CheckpointPersister is the Persister that keeps snapshots in a checkpoint.Store, as incremental
// checkpoints: a generation object per live generation and a manifest (checkpoint.Store.SaveSet).
// A save writes the generations that changed since the last checkpoint of the same filter and
// references the others: a sealed generation is written once, the current one at every save. It
// is safe for concurrent use.
//
// Policy on restore: the newest usable snapshot wins, a manifest or a single-file snapshot (v5);
// a corrupt, truncated or foreign file, or a manifest whose generation object is missing or
// damaged, falls back to the previous one. A snapshot taken with a configuration that changes the
// filter's layout or hashing (window count, interval, capacity, false-positive rate or hash seed),
// or written in the filter layout of an older kdedup (snapshot format v1 to v4), cannot be used:
// the unit starts cold (and is rebuilt from the output topic where that is possible) and a
// warning says why.
type CheckpointPersister struct {
	store    *checkpoint.Store
	log      *slog.Logger
	rejected func(reason string)
	keySpec  string // see WithKeySpec
	signKey  []byte // see WithSigningKey

	mu    sync.Mutex
	bases map[string]map[uint64]savedGen // unit → generation → what the last checkpoint holds
}

// savedGen is a generation that a committed manifest references: its object, and the generation's
// version when the object was written (or restored), which tells whether it changed since.
type savedGen struct {
	ref     snapshot.GenRef
	version window.GenerationVersion
}

// NewCheckpointPersister returns a Persister over store. A nil logger means slog.Default().
func NewCheckpointPersister(store *checkpoint.Store, log *slog.Logger) *CheckpointPersister {
	if log == nil {
		log = slog.Default()
	}
	return &CheckpointPersister{store: store, log: log, bases: map[string]map[uint64]savedGen{}, rejected: func(string) {}}
}

// OnRejected makes p report every snapshot a restore rejects to fn, with the reason (one of
// RejectReasons), for a metric. It must be called before p is used.
func (p *CheckpointPersister) OnRejected(fn func(reason string)) { p.rejected = fn }

// Reasons a restore rejects a snapshot for (RejectReasons): the snapshot is damaged, was written
// for another configuration, or is intact but implausible (window.ImplausibleReasons, prefixed),
// which a store that someone else can write may hold.
const (
	RejectCorrupt      = "corrupt"
	RejectIncompatible = "incompatible"
	RejectMissing      = "missing"
	// RejectUnsigned is a snapshot without a signature while a signing key is set.
	RejectUnsigned = "unsigned"
	// RejectBadSignature is a manifest whose HMAC, or a generation object whose SHA-256, does not
	// match what the signing key signed.
	RejectBadSignature = "bad_signature"
)

// RejectReasons returns every reason OnRejected's function can be given.
func RejectReasons() []string {
	out := []string{RejectCorrupt, RejectIncompatible, RejectMissing, RejectUnsigned, RejectBadSignature}
	for _, r := range window.ImplausibleReasons() {
		out = append(out, "implausible_"+r)
	}
	return out
}

// rejectReason classifies the error a snapshot was rejected with.
func rejectReason(err error) string {
	var ie *window.ImplausibleError
	switch {
	case errors.As(err, &ie):
		return "implausible_" + ie.Reason
	case errors.Is(err, snapshot.ErrUnsigned):
		return RejectUnsigned
	case errors.Is(err, snapshot.ErrBadSignature):
		return RejectBadSignature
	case errors.Is(err, checkpoint.ErrIncompatible) || errors.Is(err, snapshot.ErrUnknownVersion):
		return RejectIncompatible
	case errors.Is(err, fs.ErrNotExist):
		return RejectMissing
	}
	return RejectCorrupt
}

// WithKeySpec makes p record spec, the key spec (DEDUP_KEY, as identity.Spec.String spells it)
// whose identities the filters hold, in every snapshot it saves, and refuse to restore a snapshot
// that records another one: its filter holds identities of another kind, which would make
// duplicates pass and originals drop. Such a snapshot is rejected as incompatible, with a warning
// that names both specs, so the unit starts cold and is rebuilt from the output topic where that
// is possible. A snapshot of format version 6 or older does not record its key spec and is
// restored as before. It returns p; call it before p is used. Default: "" (record nothing, check
// nothing).
func (p *CheckpointPersister) WithKeySpec(spec string) *CheckpointPersister {
	p.keySpec = spec
	return p
}

// MinSigningKey is the shortest key WithSigningKey takes, in bytes.
const MinSigningKey = snapshot.MinSigningKey

// WithSigningKey makes p sign every manifest it saves with key (snapshot.EncodeSignedManifest:
// an HMAC-SHA256 over the manifest, and the SHA-256 of every generation object it references),
// and restore only snapshots signed with it: an unsigned snapshot (any single-file snapshot, and
// every manifest older than version 7) is rejected as RejectUnsigned, a manifest whose HMAC or a
// generation object whose SHA-256 does not match as RejectBadSignature, and the restore falls
// back to an older snapshot or starts cold, as for every rejection. key must be at least
// snapshot.MinSigningKey bytes; it panics otherwise (the config checks it first). It returns p;
// call it before p is used. Default: nil (sign nothing, check nothing, hash nothing).
func (p *CheckpointPersister) WithSigningKey(key []byte) *CheckpointPersister {
	if len(key) < MinSigningKey {
		panic(fmt.Sprintf("dedup: signing key of %d bytes, at least %d", len(key), MinSigningKey))
	}
	p.signKey = key
	return p
}

// restored is what one snapshot restores: the filter and, for a manifest, what it references.
type restored struct {
	f    *window.Filter
	refs map[uint64]snapshot.GenRef
}

// Restore loads the newest usable snapshot of unit into cfg; Restored.Snapshot names it. With none
// usable it returns a nil filter and checkpoint.OutcomeCold, after logging why each snapshot was
// rejected. It returns an error only when the store itself fails (for example it cannot list or
// read the directory).
func (p *CheckpointPersister) Restore(ctx context.Context, unit string, cfg window.Config) (*window.Filter, Restored, error) {
	r, res, err := checkpoint.Load(ctx, p.store, unit, func(h snapshot.Header, d *snapshot.Decoder) (restored, error) {
		return p.restoreOne(ctx, unit, cfg, h, d)
	})
	for _, fl := range res.Failures {
		reason := rejectReason(fl.Err)
		p.rejected(reason)
		p.log.Warn("snapshot rejected", "unit", unit, "file", fl.Snapshot.Name, "reason", reason, "error", fl.Err.Error())
	}
	if err != nil && !errors.Is(err, checkpoint.ErrNoUsableSnapshot) {
		return nil, Restored{}, err
	}
	if r.f == nil {
		if len(res.Failures) > 0 {
			p.log.Warn("no usable snapshot: starting cold; duplicates of records produced before this start may pass",
				"unit", unit, "rejected", len(res.Failures))
		}
		return nil, Restored{Outcome: checkpoint.OutcomeCold, Epoch: res.Epoch}, nil
	}
	p.seed(unit, r)
	out := res.Header.OutputOffsets
	if out == nil {
		p.log.Warn("snapshot has no output offsets (format v1): the filter cannot be re-warmed from the output topic",
			"unit", unit, "file", res.Snapshot.Name)
	}
	return r.f, Restored{Outcome: res.Outcome, OutputOffsets: out, Snapshot: refOf(res.Snapshot), Epoch: res.Epoch,
		Created: res.Header.Created, SavedAt: res.Snapshot.ModTime}, nil
}

// restoreOne restores the filter of one snapshot: from the generation objects a manifest
// references, or from the data of a single-file snapshot.
func (p *CheckpointPersister) restoreOne(ctx context.Context, unit string, cfg window.Config, h snapshot.Header, d *snapshot.Decoder) (restored, error) {
	if h.Version < snapshot.VersionV5 {
		return restored{}, fmt.Errorf("%w: format version %d: the snapshot's filter layout is from an older kdedup and cannot be restored; the unit starts from the output topic instead",
			checkpoint.ErrIncompatible, h.Version)
	}
	if p.signKey != nil {
		if err := h.VerifySignature(p.signKey); err != nil {
			return restored{}, fmt.Errorf("%w: %w", checkpoint.ErrUntrusted, err)
		}
	}
	if p.keySpec != "" && h.KeySpecKnown() && h.KeySpec != p.keySpec {
		return restored{}, fmt.Errorf("%w: the snapshot's identities were extracted with DEDUP_KEY=%q, this worker's is %q; the unit is rebuilt instead",
			checkpoint.ErrIncompatible, h.KeySpec, p.keySpec)
	}
	if !h.SeedMatches(cfg.Seed) {
		return restored{}, fmt.Errorf("%w: the snapshot was written with another hash seed (fingerprint %s, this worker's DEDUP_HASH_SEED has %s); the unit is rebuilt instead",
			checkpoint.ErrIncompatible, h.SeedFingerprint(), snapshot.SeedFingerprint(cfg.Seed))
	}
	m := metaFromHeader(h)
	m.Seed = cfg.Seed // matched above; a version 7 header holds only the fingerprint
	var f *window.Filter
	var err error
	r := restored{}
	if h.Manifest() {
		r.refs = make(map[uint64]snapshot.GenRef, len(h.Refs))
		for i, g := range h.Gens {
			r.refs[g.Number] = h.Refs[i]
		}
		f, err = window.RestoreGenerations(cfg, m, func(gen uint64) (window.GenerationReader, error) {
			return p.store.OpenGeneration(ctx, unit, r.refs[gen], gen, m.Sections(gen))
		})
	} else {
		f, err = window.Restore(cfg, m, d)
	}
	switch {
	case errors.Is(err, window.ErrIncompatible):
		return restored{}, fmt.Errorf("%w: %w", checkpoint.ErrIncompatible, err)
	case errors.Is(err, window.ErrImplausible):
		return restored{}, fmt.Errorf("%w: %w", checkpoint.ErrUntrusted, err)
	}
	r.f = f
	return r, err
}

// seed makes the generations a restored manifest references the base of the filter's next save:
// the generations that are not current any more (after the restore aged the filter) hold exactly
// what their objects hold, so they need not be written again until a key is added to them.
func (p *CheckpointPersister) seed(unit string, r restored) {
	base := map[uint64]savedGen{}
	m := r.f.Meta()
	for s, e := range m.SlotEpochs {
		if ref, ok := r.refs[uint64(e)]; ok && e >= 0 {
			base[uint64(e)] = savedGen{ref: ref, version: m.Versions[s]}
		}
	}
	p.mu.Lock()
	p.bases[unit] = base
	p.mu.Unlock()
}

// Newest returns the newest snapshot of unit the store lists, without reading it, or the zero
// SnapshotRef when there is none. It returns the store's error when listing fails.
func (p *CheckpointPersister) Newest(ctx context.Context, unit string) (SnapshotRef, error) {
	infos, err := p.store.Snapshots(ctx, unit)
	if err != nil || len(infos) == 0 {
		return SnapshotRef{}, err
	}
	return refOf(infos[0]), nil
}

func refOf(info checkpoint.Info) SnapshotRef {
	return SnapshotRef{Name: info.Name, Seq: info.Seq, Size: info.Size, Epoch: info.Epoch}
}

// Save writes f's state for unit as an incremental checkpoint: the generation objects of the
// generations that changed since the unit's last checkpoint of f (all of them for a filter it has
// not saved or restored), then, once they are durable, seal, then the manifest; only if all
// succeed does the checkpoint replace older ones. The filter rotates again as soon as the objects
// are written, before seal. A store error wrapping checkpoint.ErrNotDurable is returned as a
// failure although the manifest is visible: it is complete and sealed, but may not survive a
// crash. A pruning failure is only logged. SaveStats says what was sent to the store, failed or
// not.
func (p *CheckpointPersister) Save(ctx context.Context, unit string, f *window.Filter, info SnapshotInfo, seal func(context.Context) error) (SnapshotRef, SaveStats, error) {
	p.mu.Lock()
	base := p.bases[unit]
	p.mu.Unlock()
	var next map[uint64]savedGen
	var size int64
	snap, st, err := p.store.SaveSet(ctx, unit, func(tx *checkpoint.Txn) ([]byte, error) {
		var manifest []byte
		err := f.SnapshotGenerations(func(x *window.Export) error {
			h := headerFromMeta(x.Meta(), info)
			h.KeySpec = p.keySpec
			var err error
			if next, size, err = writeGenerations(tx, x, &h, base, p.signKey != nil); err != nil {
				return err
			}
			if err := recount(&h, x); err != nil {
				return err
			}
			x.Release()
			if err := seal(ctx); err != nil {
				return err
			}
			b := bytes.Buffer{}
			if p.signKey != nil {
				err = snapshot.EncodeSignedManifest(&b, h, p.signKey)
			} else {
				err = snapshot.EncodeManifest(&b, h)
			}
			manifest = b.Bytes()
			return err
		})
		return manifest, err
	})
	stats := SaveStats{Store: p.store.Kind(), Written: st.Written, Created: st.Created, Reused: st.Reused}
	if errors.Is(err, checkpoint.ErrPrune) {
		p.log.Warn("old snapshots could not be pruned", "unit", unit, "error", err.Error())
		err = nil
	}
	if err != nil {
		return SnapshotRef{}, stats, err
	}
	stats.Size = size + snap.Size
	p.mu.Lock()
	p.bases[unit] = next
	p.mu.Unlock()
	return refOf(snap), stats, nil
}

// recount sets h's fill counts to the export's as they are after its generations were written
// (window.Export.Counts), so that they cover every key in the written words: a generation at the
// memory cap takes keys, counted, while it is written.
func recount(h *snapshot.Header, x *window.Export) error {
	fill, stages, err := x.Counts()
	if err != nil {
		return err
	}
	h.Fill = fill
	for i := range h.Stages {
		h.Stages[i].Counts = stages[i]
	}
	return nil
}

// writeGenerations adds to h a reference per live generation of the export: to the object base
// holds for it if the generation did not change since and the store still lists the object, else
// to a new object it writes. The new objects are written in parallel, up to GOMAXPROCS at a time
// (a filter's first save writes all of them). It returns what the new manifest references, and
// the size of the objects; if any write fails, the errors of all of them.
//
// With sum set every reference carries the SHA-256 of its object, and a base object without one is
// written again.
func writeGenerations(tx *checkpoint.Txn, x *window.Export, h *snapshot.Header, base map[uint64]savedGen, sum bool) (map[uint64]savedGen, int64, error) {
	m := x.Meta()
	sgs := make([]savedGen, len(h.Gens))
	var todo []int
	for i, g := range h.Gens {
		v := m.Versions[g.Slot]
		sg, ok := base[g.Number]
		unsummed := sum && sg.ref.SHA256 == [sha256.Size]byte{}
		if _, listed := tx.Exists(sg.ref.Object); !ok || !listed || !sg.version.Unchanged(v) || unsummed {
			todo = append(todo, i)
			sg = savedGen{version: v}
		}
		sgs[i] = sg
	}
	errs := make([]error, len(h.Gens))
	write := func(i int) {
		g := h.Gens[i]
		sgs[i].ref, errs[i] = writeGeneration(tx, x, g.Number, m.Sections(g.Number), sum)
	}
	if len(todo) == 1 { // a save after the first: the current generation alone
		write(todo[0])
	} else {
		parallel(todo, runtime.GOMAXPROCS(0), write)
	}
	if err := errors.Join(errs...); err != nil {
		return nil, 0, err
	}
	next := make(map[uint64]savedGen, len(h.Gens))
	var size int64
	for i, g := range h.Gens {
		h.Refs = append(h.Refs, sgs[i].ref)
		next[g.Number] = sgs[i]
		size += sgs[i].ref.Size
	}
	return next, size, nil
}

// writeGeneration writes generation gen of the export as a new generation object.
// With withSum set the reference carries the SHA-256 of the object's bytes.
func writeGeneration(tx *checkpoint.Txn, x *window.Export, gen uint64, sections []uint64, withSum bool) (snapshot.GenRef, error) {
	var sum uint32
	var sha hash.Hash
	obj, err := tx.Create(func(w io.Writer) error {
		if withSum {
			sha = sha256.New()
			w = io.MultiWriter(w, sha)
		}
		e, err := snapshot.NewGenEncoder(w, snapshot.GenHeader{Generation: gen, Sections: sections})
		if err != nil {
			return err
		}
		if err := x.Generation(gen, e.WriteWords); err != nil {
			return err
		}
		err = e.Close()
		sum = e.Checksum()
		return err
	})
	if err != nil {
		return snapshot.GenRef{}, fmt.Errorf("generation %d: %w", gen, err)
	}
	ref := snapshot.GenRef{Object: obj.Name, Size: obj.Size, Checksum: sum}
	if withSum {
		sha.Sum(ref.SHA256[:0])
	}
	return ref, nil
}

func headerFromMeta(m window.Meta, info SnapshotInfo) snapshot.Header {
	h := snapshot.Header{
		Generations:       m.Generations,
		Interval:          m.Interval,
		Capacity:          m.Capacity,
		FalsePositiveRate: m.FalsePositiveRate,
		Seed:              m.Seed,
		K:                 m.K,
		FirstBits:         m.FirstBits,
		SectorBits:        m.SectorBits,
		Sectors:           m.Sectors,
		Groups:            m.Groups,
		Slots:             m.Slots,
		SlotUses:          m.SlotUses,
		Words:             m.Words,
		ShardBits:         m.ShardBits,
		Fill:              m.Fill,
		Origin:            m.Origin,
		Epoch:             m.Epoch,
		Rotations:         m.Rotations,
		Scope:             info.Scope.kind().snapshot,
		Topic:             info.Topic,
		Partition:         info.Partition,
		InputOffsets:      info.InputOffsets,
		OutputOffsets:     info.OutputOffsets,
		OwnerEpoch:        info.OwnerEpoch,
		Created:           time.Now(),
	}
	for _, st := range m.Stages {
		h.Stages = append(h.Stages, snapshot.Stage{
			Generation: st.Epoch, Index: st.Index, Groups: st.Groups, K: st.K, FirstBits: st.FirstBits,
			Sectors: st.Sectors, Words: st.Words, Counts: st.Counts,
		})
		h.Words += st.Words // the stages' words follow the slots'
	}
	for slot, e := range m.SlotEpochs {
		if e >= 0 {
			h.Gens = append(h.Gens, snapshot.Generation{Number: uint64(e), Start: m.GenerationStart(uint64(e)), Slot: slot})
		}
	}
	// Newest first, as the format wants.
	for i := 1; i < len(h.Gens); i++ {
		for j := i; j > 0 && h.Gens[j].Number > h.Gens[j-1].Number; j-- {
			h.Gens[j], h.Gens[j-1] = h.Gens[j-1], h.Gens[j]
		}
	}
	if h.OutputOffsets == nil {
		h.OutputOffsets = map[int32]int64{}
	}
	return h
}

func metaFromHeader(h snapshot.Header) window.Meta {
	m := window.Meta{
		Generations:       h.Generations,
		Interval:          h.Interval,
		Capacity:          h.Capacity,
		FalsePositiveRate: h.FalsePositiveRate,
		Seed:              h.Seed,
		K:                 h.K,
		FirstBits:         h.FirstBits,
		SectorBits:        h.SectorBits,
		Sectors:           h.Sectors,
		Groups:            h.Groups,
		Slots:             h.Slots,
		SlotUses:          h.SlotUses,
		Origin:            h.Origin,
		Epoch:             h.Epoch,
		Rotations:         h.Rotations,
		Words:             h.SlotWords(),
		ShardBits:         h.ShardBits,
		Fill:              h.Fill,
		SlotEpochs:        make([]int64, max(h.Slots, 0)),
	}
	for _, st := range h.Stages {
		m.Stages = append(m.Stages, window.StageMeta{
			Epoch: st.Generation, Index: st.Index, Groups: st.Groups, K: st.K, FirstBits: st.FirstBits,
			Sectors: st.Sectors, Words: st.Words, Counts: st.Counts,
		})
	}
	for i := range m.SlotEpochs {
		m.SlotEpochs[i] = -1
	}
	for _, g := range h.Gens {
		if g.Slot >= 0 && g.Slot < len(m.SlotEpochs) {
			m.SlotEpochs[g.Slot] = int64(g.Number)
		}
	}
	return m
}

// parallel calls fn for every item, in up to n goroutines at once, and returns when all calls
// have returned.
func parallel(items []int, n int, fn func(item int)) {
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(n, len(items)) {
		wg.Go(func() {
			for i := next.Add(1) - 1; i < int64(len(items)); i = next.Add(1) - 1 {
				fn(items[i])
			}
		})
	}
	wg.Wait()
}
