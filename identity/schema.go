package identity

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"
)

// Schema is a schema as a schema registry serves it (Confluent's GET /schemas/ids/{id}), with its
// references resolved.
type Schema struct {
	// Type is "AVRO" (the registry's default, also for ""), "PROTOBUF" or "JSON".
	Type string
	// Text is the schema: Avro's JSON, or Protobuf's .proto source.
	Text string
	// References are the schemas this one refers to: for Avro the named types it uses by name,
	// for Protobuf the files it imports (Name is the import path).
	References []Reference
}

// Reference is one resolved reference of a Schema.
type Reference struct {
	Name    string // the name the schema refers to it by
	Subject string
	Version int
	Schema  Schema
}

// Registry serves schemas by id. Implementations must be safe for concurrent use.
type Registry interface {
	// Schema returns the schema with the given id and its references. It returns an error
	// wrapping ErrUnknownSchema when the registry does not know the id (a permanent answer), and
	// any other error when it could not be asked (down, timed out, 5xx): those are retried.
	Schema(ctx context.Context, id uint32) (Schema, error)
	// Check returns nil if the registry answers requests, for the start-up check.
	Check(ctx context.Context) error
}

// ErrUnknownSchema reports a schema id the registry does not know.
var ErrUnknownSchema = errors.New("identity: unknown schema id")

// wireHeaderLen is the length of Confluent's wire format header: magic byte 0 and a 4-byte
// big-endian schema id.
const wireHeaderLen = 5

// plan is what one schema id compiles to for a spec: how to reach the field in its records, or the
// permanent reason none of them has an identity.
type plan struct {
	absent Reason    // Found, UnknownSchema or NotInSchema
	why    string    // for absent != Found: what is wrong, for the log
	avro   avroPlan  // KindAvro
	proto  protoPlan // KindProtobuf
}

// schemaCache compiles and caches the plan of every schema id it meets, fetching each schema once
// for the process. Lookups are lock-free reads of a copy-on-write map.
type schemaCache struct {
	spec Spec
	reg  Registry

	plans atomic.Pointer[map[uint32]*plan]

	mu       sync.Mutex
	inflight map[uint32]*fetch
	failed   map[uint32]failure // the last fetch of the id could not ask the registry
	unknown  int                // plans cached for ids the registry does not know
	// retryAfter is how long a failure is answered from failed (retryAfter; tests change it).
	retryAfter time.Duration
}

// failure is a fetch that could not ask the registry, kept for retryAfter so that a record of
// the id does not wait for the registry again at once.
type failure struct {
	at  time.Time
	err error
}

// retryAfter is how long a failed fetch of a schema id is answered from the cache: callers that
// extract many records (a per-source count, say) get the retry error at once instead of a
// request, and thus a timeout, per record.
const retryAfter = time.Second

// maxUnknownIDs bounds the schema ids the registry does not know whose answer is kept: records
// with made-up ids cannot grow the cache without bound. Past it, each such record asks again.
const maxUnknownIDs = 4096

// fetch is one registry request in progress, shared by the goroutines that need the same id.
type fetch struct {
	done chan struct{}
	p    *plan
	err  error
}

func newSchemaCache(spec Spec, reg Registry) *schemaCache {
	c := &schemaCache{spec: spec, reg: reg, inflight: map[uint32]*fetch{}, failed: map[uint32]failure{}, retryAfter: retryAfter}
	c.plans.Store(&map[uint32]*plan{})
	return c
}

// extract reads the wire format header of data, finds the plan of its schema id and follows it.
func (c *schemaCache) extract(ctx context.Context, data []byte) ([]byte, Reason, error) {
	if len(data) < wireHeaderLen || data[0] != 0 {
		return nil, NotWireFormat, nil
	}
	id := binary.BigEndian.Uint32(data[1:wireHeaderLen])
	p := (*c.plans.Load())[id]
	if p == nil {
		var err error
		if p, err = c.load(ctx, id); err != nil {
			return nil, Found, err
		}
	}
	if p.absent != Found {
		return nil, p.absent, nil
	}
	body := data[wireHeaderLen:]
	if c.spec.Kind == KindAvro {
		return p.avro.extract(body)
	}
	return p.proto.extract(body)
}

// load returns the plan of schema id, fetching and compiling it (once, whoever asks at the same
// time). A registry that could not be asked gives an error wrapping ErrRetry, and nothing is
// cached.
func (c *schemaCache) load(ctx context.Context, id uint32) (*plan, error) {
	c.mu.Lock()
	if p := (*c.plans.Load())[id]; p != nil {
		c.mu.Unlock()
		return p, nil
	}
	if fl, ok := c.failed[id]; ok && time.Since(fl.at) < c.retryAfter {
		c.mu.Unlock()
		return nil, fl.err
	}
	f := c.inflight[id]
	leader := f == nil
	if leader {
		f = &fetch{done: make(chan struct{})}
		c.inflight[id] = f
	}
	c.mu.Unlock()
	if !leader {
		select {
		case <-f.done:
			return f.p, f.err
		case <-ctx.Done():
			return nil, fmt.Errorf("%w: schema %d: %w", ErrRetry, id, ctx.Err())
		}
	}
	f.p, f.err = c.fetchPlan(ctx, id)
	c.mu.Lock()
	delete(c.inflight, id)
	c.keep(id, f)
	c.mu.Unlock()
	close(f.done)
	return f.p, f.err
}

// keep records the outcome of the fetch of id; c.mu is held.
func (c *schemaCache) keep(id uint32, f *fetch) {
	switch {
	case f.err != nil:
		c.failed[id] = failure{time.Now(), f.err}
	case f.p.absent == UnknownSchema && c.unknown >= maxUnknownIDs:
		delete(c.failed, id)
	default:
		delete(c.failed, id)
		if f.p.absent == UnknownSchema {
			c.unknown++
		}
		old := *c.plans.Load()
		m := make(map[uint32]*plan, len(old)+1)
		for k, v := range old {
			m[k] = v
		}
		m[id] = f.p
		c.plans.Store(&m)
	}
}

// fetchPlan asks the registry for schema id and compiles it.
func (c *schemaCache) fetchPlan(ctx context.Context, id uint32) (*plan, error) {
	s, err := c.reg.Schema(ctx, id)
	switch {
	case errors.Is(err, ErrUnknownSchema):
		return &plan{absent: UnknownSchema, why: err.Error()}, nil
	case err != nil:
		return nil, fmt.Errorf("%w: schema %d: %w", ErrRetry, id, err)
	}
	return compile(c.spec, s), nil
}

// compile builds the plan of schema s for spec. A schema of the wrong type, or one that does not
// parse, gives UnknownSchema; a path it does not have gives NotInSchema.
func compile(spec Spec, s Schema) *plan {
	typ := s.Type
	if typ == "" {
		typ = "AVRO"
	}
	want := "AVRO"
	if spec.Kind == KindProtobuf {
		want = "PROTOBUF"
	}
	if typ != want {
		return &plan{absent: UnknownSchema, why: fmt.Sprintf("schema type %s, want %s", typ, want)}
	}
	var (
		p   plan
		err error
	)
	if spec.Kind == KindAvro {
		p.avro, err = compileAvro(s, spec.Path)
	} else {
		p.proto, err = compileProto(s, spec.Path)
	}
	var nis *notInSchemaError
	switch {
	case errors.As(err, &nis):
		return &plan{absent: NotInSchema, why: err.Error()}
	case err != nil:
		return &plan{absent: UnknownSchema, why: err.Error()}
	}
	return &p
}

// notInSchemaError reports a path that a schema does not have.
type notInSchemaError struct{ msg string }

func (e *notInSchemaError) Error() string { return "identity: " + e.msg }
