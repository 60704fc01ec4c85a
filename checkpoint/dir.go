package checkpoint

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DirBackend is a Backend keeping objects as files in one local directory, which may be a volume
// shared by several replicas. It is safe for concurrent use.
//
// Atomic write protocol: Create streams the object through a 1 MiB buffer into a temporary file
// ".<name>.<pid>.<random>.tmp" in the same directory (unique per process and call), fsyncs it,
// renames it to name and fsyncs the directory. A crash at any point leaves either no object or the
// complete one under name, never a partial one; a failure before the rename removes the temporary
// file. If the directory fsync fails, the object is visible but its commit may not survive a
// crash: Create returns it with an error wrapping ErrNotDurable. List ignores temporary files and
// Sweep removes abandoned ones.
//
// Every file operation goes through an FS: OSFS unless the backend was made with NewDirBackendFS
// (checkpoint/errorfs wraps one to inject failures).
type DirBackend struct {
	fs  FS
	dir string
}

var _ Backend = (*DirBackend)(nil)

// NewDirBackend returns a DirBackend over dir, creating the directory (and its parents) if
// needed. It fails if dir cannot be created or is not a directory.
func NewDirBackend(dir string) (*DirBackend, error) {
	return NewDirBackendFS(OSFS{}, dir)
}

// NewDirBackendFS is NewDirBackend over the file system fsys instead of OSFS: for tests that
// inject file system failures (see checkpoint/errorfs).
func NewDirBackendFS(fsys FS, dir string) (*DirBackend, error) {
	if err := fsys.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("checkpoint: creating snapshot directory: %w", err)
	}
	return &DirBackend{fs: fsys, dir: dir}, nil
}

// Dir returns the directory the backend writes to.
func (d *DirBackend) Dir() string { return d.dir }

// String returns the directory as a file:// URL.
func (d *DirBackend) String() string { return Location{Scheme: SchemeFile, Dir: d.dir}.String() }

// Create implements Backend with the atomic write protocol described on DirBackend.
func (d *DirBackend) Create(ctx context.Context, name string, write func(w io.Writer) error) (Object, error) {
	if err := validObject(name); err != nil {
		return Object{}, err
	}
	f, err := d.fs.CreateTemp(d.dir, "."+name+"."+strconv.Itoa(os.Getpid())+".*.tmp")
	if err != nil {
		return Object{}, err
	}
	tmp := f.Name()
	committed := false
	defer func() {
		if !committed {
			_ = d.fs.Remove(tmp)
		}
	}()
	fi, err := d.writeTemp(f, write)
	if err != nil {
		return Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return Object{}, fmt.Errorf("before commit: %w", err)
	}
	if err := d.fs.Rename(tmp, filepath.Join(d.dir, name)); err != nil {
		return Object{}, fmt.Errorf("rename: %w", err)
	}
	committed = true
	obj := Object{Name: name, Size: fi.Size(), ModTime: fi.ModTime()}
	if err := d.fs.SyncDir(d.dir); err != nil {
		return obj, fmt.Errorf("%w: fsync directory: %w", ErrNotDurable, err)
	}
	return obj, nil
}

// writeBufs holds the write buffers of writeTemp: a checkpoint round of a topic with many
// partitions writes two files per partition, and a buffer each would be garbage. They are
// 64 KiB, as the snapshot encoders' own buffers are: a file written in 64 KiB system calls costs
// no more CPU than in 1 MiB ones, and the buffers of the writes in flight at once (one per
// partition being saved) stay small at many partitions (1 MiB each were 12 MB of the heap at 96).
var writeBufs = sync.Pool{New: func() any { return bufio.NewWriterSize(nil, 64<<10) }}

// writeTemp writes the object into the temporary file f, makes it durable and closes it.
func (d *DirBackend) writeTemp(f File, write func(w io.Writer) error) (fs.FileInfo, error) {
	closed := false
	defer func() {
		if !closed {
			_ = f.Close()
		}
	}()
	bw := writeBufs.Get().(*bufio.Writer)
	bw.Reset(f)
	defer func() {
		bw.Reset(nil) // drops what a failed write left buffered, and the file
		writeBufs.Put(bw)
	}()
	if err := write(bw); err != nil {
		return nil, fmt.Errorf("writing: %w", err)
	}
	if err := bw.Flush(); err != nil {
		return nil, fmt.Errorf("writing: %w", err)
	}
	if err := f.Chmod(0o644); err != nil {
		return nil, fmt.Errorf("chmod: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("fsync: %w", err)
	}
	fi, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat: %w", err)
	}
	closed = true
	if err := f.Close(); err != nil {
		return nil, fmt.Errorf("close: %w", err)
	}
	return fi, nil
}

// fileReader is an open file with the size it had when it was opened.
type fileReader struct {
	File
	size int64
}

func (r fileReader) Size() int64 { return r.size }

// Open implements Backend.
func (d *DirBackend) Open(_ context.Context, name string) (ObjectReader, error) {
	if err := validObject(name); err != nil {
		return nil, err
	}
	f, err := d.fs.Open(filepath.Join(d.dir, name))
	if err != nil {
		return nil, err
	}
	size := int64(-1)
	if fi, err := f.Stat(); err == nil && fi.Mode().IsRegular() {
		size = fi.Size()
	}
	return fileReader{f, size}, nil
}

// List implements Backend: the regular files of the directory whose names start with prefix,
// temporary files excepted.
func (d *DirBackend) List(_ context.Context, prefix string) ([]Object, error) {
	if nf, ok := d.fs.(namesFS); ok {
		return d.listNames(nf, prefix)
	}
	entries, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return nil, err
	}
	var objs []Object
	for _, e := range entries {
		name := e.Name()
		if !strings.HasPrefix(name, prefix) || strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		fi, err := e.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		objs = append(objs, Object{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
	}
	return objs, nil
}

// listNames is List through a namesFS: the names first, then an Lstat of each one that matches.
func (d *DirBackend) listNames(nf namesFS, prefix string) ([]Object, error) {
	names, err := nf.ReadDirNames(d.dir, func(name []byte) bool {
		return len(name) > 0 && name[0] != '.' && len(name) >= len(prefix) && string(name[:len(prefix)]) == prefix
	})
	if err != nil {
		return nil, err
	}
	var objs []Object
	for _, name := range names {
		fi, err := nf.Lstat(filepath.Join(d.dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if fi.Mode().IsRegular() {
			objs = append(objs, Object{Name: name, Size: fi.Size(), ModTime: fi.ModTime()})
		}
	}
	return objs, nil
}

// Delete implements Backend.
func (d *DirBackend) Delete(_ context.Context, name string) error {
	if err := validObject(name); err != nil {
		return err
	}
	if err := d.fs.Remove(filepath.Join(d.dir, name)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// Sweep implements Backend: it removes the temporary files of the objects it selects that were
// last modified before before.
func (d *DirBackend) Sweep(_ context.Context, prefix string, before time.Time, match func(name string) bool) error {
	entries, err := d.fs.ReadDir(d.dir)
	if err != nil {
		return err
	}
	var errs []error
	for _, e := range entries {
		target, ok := tempTarget(e.Name())
		if !ok || !strings.HasPrefix(target, prefix) || !match(target) {
			continue
		}
		fi, err := e.Info()
		if err != nil || !fi.ModTime().Before(before) {
			continue
		}
		if err := d.fs.Remove(filepath.Join(d.dir, e.Name())); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// tempTarget returns the object name a temporary file ".<name>.<pid>.<random>.tmp" was to become.
func tempTarget(file string) (string, bool) {
	rest, ok := strings.CutPrefix(file, ".")
	if !ok {
		return "", false
	}
	rest, ok = strings.CutSuffix(rest, ".tmp")
	if !ok {
		return "", false
	}
	rest, rnd, ok := cutLast(rest)
	if !ok || !allDigits(rnd) {
		return "", false
	}
	name, pid, ok := cutLast(rest)
	return name, ok && allDigits(pid) && name != ""
}

// cutLast splits s around its last '.'.
func cutLast(s string) (before, after string, ok bool) {
	i := strings.LastIndexByte(s, '.')
	if i < 0 {
		return s, "", false
	}
	return s[:i], s[i+1:], true
}
