// Package errorfs wraps a checkpoint.FS and fails the operations a test chooses, in the manner of
// pebble's vfs/errorfs: a write that runs out of space half-way, an fsync, a rename or a directory
// fsync that fails, a read that hits an I/O error. Tests use it to prove what a checkpoint.Store
// over a checkpoint.DirBackend, and what is built on it, does when the disk fails.
package errorfs

import (
	"io/fs"
	"os"
	"sync"

	"github.com/kdedup/kdedup/checkpoint"
)

// Op is a file system operation FS can fail.
type Op string

// The operations, by the FS or File method that performs them.
const (
	OpCreate  Op = "create"  // FS.CreateTemp
	OpWrite   Op = "write"   // File.Write: half of the bytes are written, then the error
	OpSync    Op = "sync"    // File.Sync: nothing is synced
	OpClose   Op = "close"   // File.Close: the file is closed, then the error
	OpRename  Op = "rename"  // FS.Rename: nothing is renamed
	OpSyncDir Op = "syncdir" // FS.SyncDir
	OpList    Op = "list"    // FS.ReadDir
	OpOpen    Op = "open"    // FS.Open
	OpRead    Op = "read"    // File.Read: nothing is read
	OpRemove  Op = "remove"  // FS.Remove: nothing is removed
)

// FS is a checkpoint.FS that passes every operation to the FS it wraps, except those Fail chose:
// they return an *fs.PathError (an *os.LinkError for OpRename) wrapping the chosen error, so that
// errors.Is(err, syscall.ENOSPC) holds for an injected ENOSPC. FS.MkdirAll, File.Seek, File.Stat
// and File.Chmod are never failed. FS is safe for concurrent use.
type FS struct {
	inner checkpoint.FS

	mu       sync.Mutex
	faults   map[Op]error
	injected map[Op]int
}

var _ checkpoint.FS = (*FS)(nil)

// New returns an FS over inner; nil means checkpoint.OSFS. No operation fails until Fail.
func New(inner checkpoint.FS) *FS {
	if inner == nil {
		inner = checkpoint.OSFS{}
	}
	return &FS{inner: inner, faults: map[Op]error{}, injected: map[Op]int{}}
}

// Fail makes every later op fail with err, on files opened before as well, until Clear. A nil
// err ends op's failure.
func (f *FS) Fail(op Op, err error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err == nil {
		delete(f.faults, op)
		return
	}
	f.faults[op] = err
}

// Clear ends every failure set by Fail.
func (f *FS) Clear() {
	f.mu.Lock()
	defer f.mu.Unlock()
	clear(f.faults)
}

// Injected returns how many times op failed because of Fail.
func (f *FS) Injected(op Op) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.injected[op]
}

// injectedErr returns the error Fail chose for op, counting it, or nil.
func (f *FS) injectedErr(op Op) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	err, ok := f.faults[op]
	if ok {
		f.injected[op]++
	}
	return err
}

// fault returns the error op on path fails with, as an *fs.PathError, or nil.
func (f *FS) fault(op Op, path string) error {
	if err := f.injectedErr(op); err != nil {
		return &fs.PathError{Op: string(op), Path: path, Err: err}
	}
	return nil
}

// MkdirAll implements checkpoint.FS.
func (f *FS) MkdirAll(dir string, perm fs.FileMode) error { return f.inner.MkdirAll(dir, perm) }

// CreateTemp implements checkpoint.FS.
func (f *FS) CreateTemp(dir, pattern string) (checkpoint.File, error) {
	if err := f.fault(OpCreate, dir); err != nil {
		return nil, err
	}
	file, err := f.inner.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return &errFile{File: file, fs: f}, nil
}

// Open implements checkpoint.FS.
func (f *FS) Open(name string) (checkpoint.File, error) {
	if err := f.fault(OpOpen, name); err != nil {
		return nil, err
	}
	file, err := f.inner.Open(name)
	if err != nil {
		return nil, err
	}
	return &errFile{File: file, fs: f}, nil
}

// Rename implements checkpoint.FS.
func (f *FS) Rename(oldpath, newpath string) error {
	if err := f.injectedErr(OpRename); err != nil {
		return &os.LinkError{Op: string(OpRename), Old: oldpath, New: newpath, Err: err}
	}
	return f.inner.Rename(oldpath, newpath)
}

// Remove implements checkpoint.FS.
func (f *FS) Remove(name string) error {
	if err := f.fault(OpRemove, name); err != nil {
		return err
	}
	return f.inner.Remove(name)
}

// ReadDir implements checkpoint.FS.
func (f *FS) ReadDir(dir string) ([]fs.DirEntry, error) {
	if err := f.fault(OpList, dir); err != nil {
		return nil, err
	}
	return f.inner.ReadDir(dir)
}

// SyncDir implements checkpoint.FS.
func (f *FS) SyncDir(dir string) error {
	if err := f.fault(OpSyncDir, dir); err != nil {
		return err
	}
	return f.inner.SyncDir(dir)
}

// errFile is a File of FS: the methods it overrides can fail.
type errFile struct {
	checkpoint.File
	fs *FS
}

func (e *errFile) Write(p []byte) (int, error) {
	if err := e.fs.fault(OpWrite, e.Name()); err != nil {
		n, _ := e.File.Write(p[:len(p)/2]) // a torn write: part of it reached the file
		return n, err
	}
	return e.File.Write(p)
}

func (e *errFile) Read(p []byte) (int, error) {
	if err := e.fs.fault(OpRead, e.Name()); err != nil {
		return 0, err
	}
	return e.File.Read(p)
}

func (e *errFile) Sync() error {
	if err := e.fs.fault(OpSync, e.Name()); err != nil {
		return err
	}
	return e.File.Sync()
}

func (e *errFile) Close() error {
	err := e.File.Close()
	if ferr := e.fs.fault(OpClose, e.Name()); ferr != nil {
		return ferr
	}
	return err
}
