package checkpoint

import (
	"context"
	"errors"
	"io"
	"time"
)

// Backend is where a Store keeps its objects: a flat namespace of named, immutable objects in a
// directory (DirBackend), an S3 bucket (S3Backend) or memory (MemBackend). It knows nothing of
// units, snapshot numbers or retention; the Store decides names, numbering, locking and what to
// delete, so that those rules exist once for every backend. Names are the Store's: 1 to
// maxNameLen bytes of the characters of a unit name (see ValidateUnit), not starting with '.';
// backends refuse others with ErrBadUnit.
//
// What a Backend must guarantee is what makes a Store crash-safe: an object becomes visible to
// List and Open, in this process and in any other over the same location, only complete, and a
// failed Create leaves nothing visible. Partial writes (temporary files, multipart uploads) are
// invisible and are removed by Sweep once the Store considers them abandoned.
//
// Errors need not name the location (the Store adds it) and must not contain credentials.
// Implementations must be safe for concurrent use.
type Backend interface {
	// Create stores a new object named name with the bytes write produces, and returns it. The
	// object becomes visible only once it is complete; a done ctx, or an error from write or from
	// the storage, before that makes Create fail with nothing new visible (the error wraps
	// write's error or ctx.Err()). One exception: an error wrapping ErrNotDurable comes with the
	// valid Object, visible and complete, whose commit may not survive a crash. write must not
	// retain the writer.
	Create(ctx context.Context, name string, write func(w io.Writer) error) (Object, error)
	// Open opens an object for reading. An object that does not exist (never created, or deleted
	// meanwhile) yields an error wrapping fs.ErrNotExist.
	Open(ctx context.Context, name string) (ObjectReader, error)
	// List returns the complete objects whose names start with prefix, in no particular order.
	// Partial writes are never listed; an object deleted while listing may or may not be.
	List(ctx context.Context, prefix string) ([]Object, error)
	// Delete removes an object. Deleting an object that does not exist is not an error.
	Delete(ctx context.Context, name string) error
	// Sweep removes the partial writes begun before before whose object name starts with prefix
	// and satisfies match: what a process that died while creating an object left behind. It
	// tries every one and returns the failures joined.
	Sweep(ctx context.Context, prefix string, before time.Time, match func(name string) bool) error
	// String returns the location as a URL, for messages and logs; it never holds credentials.
	String() string
}

// Object describes one complete object of a Backend.
type Object struct {
	// Name is the object's name in the backend's namespace.
	Name string
	// Size is its length in bytes.
	Size int64
	// ModTime is when it was written, as the backend records it.
	ModTime time.Time
}

// ObjectReader is an object opened for reading.
type ObjectReader interface {
	io.ReadCloser
	// Size returns the object's length in bytes, or -1 when the backend cannot tell. A reader
	// whose source ends before Size bytes returns an I/O error, not io.EOF, so that a broken
	// transfer is never mistaken for a short (corrupt) object.
	Size() int64
}

// ErrNotDurable is wrapped by the error of a Backend's Create, and of Store.SaveSet, when the object
// was committed (it is visible, complete, and the returned Object or Info describes it) but making
// the commit durable failed, so a crash may lose it. Store.SaveSet then leaves older snapshots
// unpruned, so that one of them survives a crash either way.
var ErrNotDurable = errors.New("checkpoint: snapshot visible but not durable")

// ctxWriter fails writes once ctx is done, so a cancelled save stops early.
type ctxWriter struct {
	ctx context.Context
	w   io.Writer
}

func (c ctxWriter) Write(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.w.Write(p)
}

// ctxReader fails reads once ctx is done, so a cancelled restore stops.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
