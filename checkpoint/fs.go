package checkpoint

import (
	"errors"
	"io"
	"io/fs"
	"os"
	"syscall"
)

// FS is the part of a file system a DirBackend uses: it creates temporary files, writes and fsyncs
// them, renames them into place, fsyncs the directory, lists it, opens snapshots and removes
// files. Paths are as the os package takes them. OSFS is the real one; checkpoint/errorfs wraps an
// FS to fail chosen operations in tests. Implementations must be safe for concurrent use.
type FS interface {
	// MkdirAll creates dir and its parents, as os.MkdirAll.
	MkdirAll(dir string, perm fs.FileMode) error
	// CreateTemp creates a new file in dir, named from pattern, open for writing, as
	// os.CreateTemp.
	CreateTemp(dir, pattern string) (File, error)
	// Open opens a file for reading, as os.Open.
	Open(name string) (File, error)
	// Rename renames oldpath to newpath, replacing newpath, as os.Rename.
	Rename(oldpath, newpath string) error
	// Remove removes a file, as os.Remove.
	Remove(name string) error
	// ReadDir lists dir sorted by name, as os.ReadDir.
	ReadDir(dir string) ([]fs.DirEntry, error)
	// SyncDir fsyncs directory dir, so that a rename in it survives a crash.
	SyncDir(dir string) error
}

// File is an open file of an FS. *os.File implements it.
type File interface {
	io.Reader
	io.Writer
	io.Seeker
	io.Closer
	// Name returns the path the file was opened or created with.
	Name() string
	// Sync fsyncs the file's contents.
	Sync() error
	// Stat returns the file's FileInfo.
	Stat() (fs.FileInfo, error)
	// Chmod changes the file's mode.
	Chmod(mode fs.FileMode) error
}

// OSFS is the FS of the operating system, through the os package: DirBackend's default. It is safe
// for concurrent use.
type OSFS struct{}

var _ FS = OSFS{}

// MkdirAll implements FS.
func (OSFS) MkdirAll(dir string, perm fs.FileMode) error { return os.MkdirAll(dir, perm) }

// CreateTemp implements FS.
func (OSFS) CreateTemp(dir, pattern string) (File, error) {
	f, err := os.CreateTemp(dir, pattern)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Open implements FS.
func (OSFS) Open(name string) (File, error) {
	f, err := os.Open(name)
	if err != nil {
		return nil, err
	}
	return f, nil
}

// Rename implements FS.
func (OSFS) Rename(oldpath, newpath string) error { return os.Rename(oldpath, newpath) }

// Remove implements FS.
func (OSFS) Remove(name string) error { return os.Remove(name) }

// ReadDir implements FS.
func (OSFS) ReadDir(dir string) ([]fs.DirEntry, error) { return os.ReadDir(dir) }

// ReadDirNames implements namesFS: the names in dir that keep accepts, in directory order. On
// Linux it parses the directory's entries itself, and makes a string only of a name it keeps.
func (OSFS) ReadDirNames(dir string, keep func(name []byte) bool) ([]string, error) {
	return readDirNames(dir, keep)
}

// Lstat implements namesFS, as os.Lstat.
func (OSFS) Lstat(name string) (fs.FileInfo, error) { return os.Lstat(name) }

// namesFS is an FS that can list the names of a directory that a filter accepts, and stat a file
// without following a symbolic link: all that DirBackend.List needs, with a fraction of the
// garbage of ReadDir (an entry and a sort per file) in a directory that holds the objects of every
// unit, which a save lists twice. OSFS implements it; an FS that does not is listed with ReadDir.
type namesFS interface {
	ReadDirNames(dir string, keep func(name []byte) bool) ([]string, error)
	Lstat(name string) (fs.FileInfo, error)
}

// SyncDir implements FS. File systems that cannot fsync directories (EINVAL, ENOTSUP) are
// tolerated.
func (OSFS) SyncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	err = d.Sync()
	if errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOTSUP) {
		err = nil
	}
	if cerr := d.Close(); err == nil {
		err = cerr
	}
	return err
}
