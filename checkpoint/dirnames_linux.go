//go:build linux

package checkpoint

import (
	"bytes"
	"encoding/binary"
	"errors"
	"io/fs"
	"sync"
	"syscall"
)

// direntBufs holds the buffers readDirNames reads directory entries into.
var direntBufs = sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}

// readDirNames returns the names in dir that keep accepts, reading the system's directory entries
// (getdents64) itself, so that a name keep refuses costs no allocation: a directory store holds
// the objects of every unit, and each save lists it twice for one unit's.
func readDirNames(dir string, keep func(name []byte) bool) ([]string, error) {
	fd, err := openDir(dir)
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: dir, Err: err}
	}
	defer syscall.Close(fd)
	bp := direntBufs.Get().(*[]byte)
	defer direntBufs.Put(bp)
	var names []string
	for {
		n, err := syscall.ReadDirent(fd, *bp)
		if errors.Is(err, syscall.EINTR) {
			continue
		}
		if err != nil {
			return nil, &fs.PathError{Op: "readdirent", Path: dir, Err: err}
		}
		if n <= 0 {
			return names, nil
		}
		names = appendDirents(names, (*bp)[:n], keep)
	}
}

// appendDirents appends to names the names of the linux_dirent64 records in buf that keep
// accepts: each record is an inode (8 bytes), an offset (8), its length (2), a type (1) and the
// name, NUL-terminated.
func appendDirents(names []string, buf []byte, keep func(name []byte) bool) []string {
	for len(buf) >= 19 {
		reclen := int(binary.NativeEndian.Uint16(buf[16:18]))
		if reclen < 19 || reclen > len(buf) {
			return names
		}
		name := buf[19:reclen]
		if i := bytes.IndexByte(name, 0); i >= 0 {
			name = name[:i]
		}
		if len(name) > 0 && !(len(name) <= 2 && (string(name) == "." || string(name) == "..")) && keep(name) {
			names = append(names, string(name))
		}
		buf = buf[reclen:]
	}
	return names
}

func openDir(dir string) (int, error) {
	for {
		fd, err := syscall.Open(dir, syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
		if !errors.Is(err, syscall.EINTR) {
			return fd, err
		}
	}
}
