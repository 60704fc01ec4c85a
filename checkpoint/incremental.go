package checkpoint

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/kdedup/kdedup/checkpoint/snapshot"
)

// Incremental checkpoints: a checkpoint made of generation objects, written once each, and a
// manifest that references them (see the package documentation).

// cleanupTimeout bounds the deletion of the objects of a failed save, which runs even when the
// save's context is done.
const cleanupTimeout = 10 * time.Second

// SaveStats says what a save sent to the store.
type SaveStats struct {
	// Written is the number of bytes sent to the store: every object created, including those of
	// a save that failed, and the manifest.
	Written int64
	// Created is the number of generation objects the save created.
	Created int
	// Reused is the number of generation objects the manifest references that earlier saves
	// created.
	Reused int
}

// Txn is a save of a checkpoint under way: SaveSet hands it to its build function, which creates
// the checkpoint's generation objects through it. It is safe for concurrent use.
type Txn struct {
	s      *Store
	ctx    context.Context
	unit   string
	seq    uint64
	listed map[string]Object // the unit's objects when the save began

	mu       sync.Mutex
	created  []Object
	reserved map[string]bool // names newName handed out, so that concurrent Creates never share one
	written  int64
}

// Unit returns the unit being saved.
func (t *Txn) Unit() string { return t.unit }

// Exists reports whether name is a generation object of the unit that the store listed when the
// save began, and returns it: an object that a new manifest may reference again.
func (t *Txn) Exists(name string) (Object, bool) {
	o, ok := t.listed[name]
	if _, gen := parseGenName(t.unit, name); !gen {
		return Object{}, false
	}
	return o, ok
}

// Create writes a new generation object of the unit with the bytes write produces and returns it.
// The object is visible once Create returns, but belongs to no checkpoint until the manifest
// that references it is committed; if the save fails, SaveSet deletes it. Unlike Backend.Create,
// an object whose commit may not be durable is a failure (the error wraps ErrNotDurable): a
// manifest references only durable objects. write must not retain its writer.
func (t *Txn) Create(write func(w io.Writer) error) (Object, error) {
	if err := t.ctx.Err(); err != nil {
		return Object{}, err
	}
	cw := &countWriter{w: nil}
	name := t.newName()
	obj, err := t.s.b.Create(t.ctx, name, func(w io.Writer) error {
		cw.w = ctxWriter{t.ctx, w}
		return write(cw)
	})
	t.mu.Lock()
	defer t.mu.Unlock()
	t.written += cw.n
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return Object{}, fmt.Errorf("creating %s: %w", name, err)
	}
	t.created = append(t.created, obj)
	if err != nil {
		return Object{}, fmt.Errorf("creating %s: %w", name, err)
	}
	return obj, nil
}

// newName returns a generation object name that no object of the save and no listed object has.
func (t *Txn) newName() string {
	const chars = "abcdefghijklmnopqrstuvwxyz0123456789"
	t.mu.Lock()
	defer t.mu.Unlock()
	for {
		var tok [tokLen]byte
		for i := range tok {
			tok[i] = chars[rand.IntN(len(chars))]
		}
		name := genName(t.unit, t.seq, string(tok[:]))
		if _, taken := t.listed[name]; !taken && !t.reserved[name] {
			if t.reserved == nil {
				t.reserved = map[string]bool{}
			}
			t.reserved[name] = true
			return name
		}
	}
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// SaveSet saves a checkpoint of unit made of generation objects and a manifest. Under the unit's
// lock it lists the unit, numbers the save, and calls build with a Txn: build creates the
// generation objects the checkpoint needs (Txn.Create), may reference objects that already exist
// (Txn.Exists), waits for whatever must happen before the commit, and returns the bytes of the
// manifest (snapshot.EncodeManifest). SaveSet checks that every object the manifest references
// exists — created by this save or listed when it began — and then creates the manifest as the
// unit's snapshot "<unit>.<seq>.snap": the commit point, after every object it names is durable.
// Then it prunes the unit (see Store).
//
// On an error nothing new belongs to a checkpoint, and the generation objects the save created
// are deleted (or left to a later prune), with two exceptions: an error wrapping
// ErrNotDurable means the manifest became visible but may not survive a crash, and nothing was
// pruned; an error wrapping ErrPrune means the checkpoint is durable but pruning failed. Either
// way SaveStats says what was sent to the store.
func (s *Store) SaveSet(ctx context.Context, unit string, build func(tx *Txn) ([]byte, error)) (Info, SaveStats, error) {
	if err := ValidateUnit(unit); err != nil {
		return Info{}, SaveStats{}, err
	}
	if err := ctx.Err(); err != nil {
		return Info{}, SaveStats{}, s.errorf("save %s: %w", unit, err)
	}
	l := s.locks.lock(unit)
	l.Lock()
	defer l.Unlock()
	objs, err := s.b.List(ctx, unit+".")
	if err != nil {
		return Info{}, SaveStats{}, s.errorf("save %s: listing: %w", unit, err)
	}
	tx := &Txn{s: s, ctx: ctx, unit: unit, listed: make(map[string]Object, len(objs))}
	for _, o := range objs {
		tx.listed[o.Name] = o
	}
	tx.seq = nextSeq(snapInfos(unit, objs), s.now())
	info, stats, err := s.commit(tx, build)
	if err != nil && info.Name == "" {
		s.discard(tx)
		return Info{}, stats, s.errorf("save %s: %w", unit, err)
	}
	if err != nil { // the manifest is visible, but may not be durable
		return info, stats, s.errorf("save %s: %w", unit, err)
	}
	if err := s.pruneLocked(ctx, unit, s.sweepDue(unit), info.Epoch); err != nil {
		return info, stats, fmt.Errorf("%w: %s in %s: %w", ErrPrune, unit, s.b, err)
	}
	return info, stats, nil
}

// commit runs build and creates the manifest it returns. On an error the returned Info is valid
// only if the manifest became visible (ErrNotDurable).
func (s *Store) commit(tx *Txn, build func(tx *Txn) ([]byte, error)) (Info, SaveStats, error) {
	manifest, err := build(tx)
	stats := func() SaveStats {
		tx.mu.Lock()
		defer tx.mu.Unlock()
		return SaveStats{Written: tx.written, Created: len(tx.created)}
	}
	if err != nil {
		return Info{}, stats(), err
	}
	meta, err := readManifestMeta(bytes.NewReader(manifest), int64(len(manifest)))
	if err != nil {
		return Info{}, stats(), fmt.Errorf("the manifest: %w", err)
	}
	st := stats()
	if err := s.checkFence(tx, meta.epoch); err != nil {
		return Info{}, st, err
	}
	for _, r := range meta.refs {
		switch {
		case slices.ContainsFunc(tx.created, func(o Object) bool { return o.Name == r }):
		case tx.listed[r].Name == r:
			st.Reused++
		default:
			return Info{}, st, fmt.Errorf("the manifest references %s, which is neither an object of the unit nor created by the save", r)
		}
	}
	if err := tx.ctx.Err(); err != nil {
		return Info{}, st, fmt.Errorf("before commit: %w", err)
	}
	obj, err := s.b.Create(tx.ctx, snapName(tx.unit, tx.seq), func(w io.Writer) error {
		_, err := ctxWriter{tx.ctx, w}.Write(manifest)
		return err
	})
	st.Written += int64(len(manifest))
	if err != nil && !errors.Is(err, ErrNotDurable) {
		return Info{}, st, err
	}
	s.refs.put(tx.unit, obj.Name, meta)
	return Info{Unit: tx.unit, Name: obj.Name, Seq: tx.seq, Size: obj.Size, ModTime: obj.ModTime, Epoch: meta.epoch}, st, err
}

// discard deletes the generation objects of a failed save, even when the save's context is done.
func (s *Store) discard(tx *Txn) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tx.ctx), cleanupTimeout)
	defer cancel()
	for _, o := range tx.created {
		_ = s.b.Delete(ctx, o.Name) // a leftover is an orphan that a later prune removes
	}
}

// OpenObject opens generation object name of unit, as a manifest of the unit references it. A
// name that is not a generation object of unit yields an error wrapping ErrBadUnit; an object
// that does not exist one wrapping fs.ErrNotExist.
func (s *Store) OpenObject(ctx context.Context, unit, name string) (ObjectReader, error) {
	if err := ValidateUnit(unit); err != nil {
		return nil, err
	}
	if _, ok := parseGenName(unit, name); !ok {
		return nil, fmt.Errorf("%w: %q is not a generation object of unit %q", ErrBadUnit, name, unit)
	}
	if err := ctx.Err(); err != nil {
		return nil, s.errorf("open %s: %w", name, err)
	}
	r, err := s.b.Open(ctx, name)
	if err != nil {
		return nil, s.errorf("open %s: %w", name, err)
	}
	return r, nil
}

// manifestMeta is what a manifest's header says about it that the store's policy needs: the
// generation objects it references (none for a single-file snapshot) and its owner epoch (0 before
// format version 7).
type manifestMeta struct {
	refs  []string
	epoch uint64
}

// readManifestMeta reads the header of a snapshot and returns its manifestMeta.
func readManifestMeta(r io.Reader, size int64) (manifestMeta, error) {
	h, err := snapshot.NewDecoderSize(r, size).Header()
	if err != nil {
		return manifestMeta{}, err
	}
	names := make([]string, len(h.Refs))
	for i, ref := range h.Refs {
		names[i] = ref.Object
	}
	return manifestMeta{refs: names, epoch: h.OwnerEpoch}, nil
}

// refCache remembers the manifestMeta of each manifest: manifests never change, so each is read
// at most once per process (and never the ones this process wrote).
type refCache struct {
	mu sync.Mutex
	m  map[string]map[string]manifestMeta // unit → manifest name → what its header says
}

func (c *refCache) get(unit, name string) (manifestMeta, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	m, ok := c.m[unit][name]
	return m, ok
}

func (c *refCache) put(unit, name string, m manifestMeta) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]map[string]manifestMeta{}
	}
	if c.m[unit] == nil {
		c.m[unit] = map[string]manifestMeta{}
	}
	c.m[unit][name] = m
}

// retain forgets the manifests of unit that are not in keep.
func (c *refCache) retain(unit string, keep []Info) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range c.m[unit] {
		if !slices.ContainsFunc(keep, func(i Info) bool { return i.Name == name }) {
			delete(c.m[unit], name)
		}
	}
}

// meta returns the manifestMeta of snapshot info, reading (and caching) its header when the cache
// lacks it. A snapshot that is not a readable snapshot references nothing and has owner epoch 0
// (it cannot be restored either); any other error is returned.
func (s *Store) meta(ctx context.Context, info Info) (manifestMeta, error) {
	if m, ok := s.refs.get(info.Unit, info.Name); ok {
		return m, nil
	}
	r, err := s.b.Open(ctx, info.Name)
	if errors.Is(err, fs.ErrNotExist) {
		return manifestMeta{}, nil // pruned meanwhile
	}
	if err != nil {
		return manifestMeta{}, fmt.Errorf("reading %s: %w", info.Name, err)
	}
	defer r.Close()
	m, err := readManifestMeta(ctxReader{ctx, r}, r.Size())
	if skippable(err) {
		m, err = manifestMeta{}, nil
	}
	if err != nil {
		return manifestMeta{}, fmt.Errorf("reading %s: %w", info.Name, err)
	}
	s.refs.put(info.Unit, info.Name, m)
	return m, nil
}

// referenced returns the objects the snapshots in kept reference, reading (and caching) the
// header of each one the cache lacks. A snapshot that is not a readable snapshot references
// nothing (it cannot be restored either); any other error is returned: then no object can be
// known unreferenced.
func (s *Store) referenced(ctx context.Context, unit string, kept []Info) (map[string]bool, error) {
	refs := map[string]bool{}
	for _, info := range kept {
		m, err := s.meta(ctx, info)
		if err != nil {
			return nil, err
		}
		for _, n := range m.refs {
			refs[n] = true
		}
	}
	return refs, nil
}
