package checkpoint

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"time"
)

// MemBackend is a Backend in memory, for tests: a Store over it keeps the policy of a real one
// without touching a disk or a network. Like the others, an object appears only complete, and
// several Stores over one MemBackend behave as replicas sharing a location. It is safe for
// concurrent use; the zero value is not usable, use NewMemBackend.
type MemBackend struct {
	mu      sync.Mutex
	objects map[string]memObject
	pending int // Creates in progress
}

type memObject struct {
	data    []byte
	modTime time.Time
}

var _ Backend = (*MemBackend)(nil)

// NewMemBackend returns an empty MemBackend.
func NewMemBackend() *MemBackend {
	return &MemBackend{objects: map[string]memObject{}}
}

// String implements Backend.
func (m *MemBackend) String() string { return "mem://" }

// Create implements Backend: the bytes are buffered and the object is added when write returned
// and ctx is not done.
func (m *MemBackend) Create(ctx context.Context, name string, write func(w io.Writer) error) (Object, error) {
	if err := validObject(name); err != nil {
		return Object{}, err
	}
	m.mu.Lock()
	m.pending++
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.pending--
		m.mu.Unlock()
	}()
	var buf bytes.Buffer
	if err := write(&buf); err != nil {
		return Object{}, fmt.Errorf("writing: %w", err)
	}
	if err := ctx.Err(); err != nil {
		return Object{}, fmt.Errorf("before commit: %w", err)
	}
	o := memObject{data: buf.Bytes(), modTime: time.Now()}
	m.mu.Lock()
	m.objects[name] = o
	m.mu.Unlock()
	return Object{Name: name, Size: int64(len(o.data)), ModTime: o.modTime}, nil
}

// memReader reads one object's bytes.
type memReader struct{ *bytes.Reader }

func (memReader) Close() error { return nil }

// Open implements Backend.
func (m *MemBackend) Open(_ context.Context, name string) (ObjectReader, error) {
	m.mu.Lock()
	o, ok := m.objects[name]
	m.mu.Unlock()
	if !ok {
		return nil, fmt.Errorf("%s: %w", name, fs.ErrNotExist)
	}
	return memReader{bytes.NewReader(o.data)}, nil
}

// List implements Backend.
func (m *MemBackend) List(_ context.Context, prefix string) ([]Object, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	var objs []Object
	for name, o := range m.objects {
		if strings.HasPrefix(name, prefix) {
			objs = append(objs, Object{Name: name, Size: int64(len(o.data)), ModTime: o.modTime})
		}
	}
	return objs, nil
}

// Delete implements Backend.
func (m *MemBackend) Delete(_ context.Context, name string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.objects, name)
	return nil
}

// Sweep implements Backend. A MemBackend's partial writes die with the Create that made them, so
// there is never anything to sweep.
func (m *MemBackend) Sweep(context.Context, string, time.Time, func(string) bool) error { return nil }

// Put stores an object as is, bypassing Create: for tests that plant foreign or damaged objects.
func (m *MemBackend) Put(name string, data []byte) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.objects[name] = memObject{data: bytes.Clone(data), modTime: time.Now()}
}

// Pending returns the number of Creates in progress.
func (m *MemBackend) Pending() int {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.pending
}
