package kafkaio

import "bytes"

// What only the tests use of kafkaio.

// Reauthentications returns how many times connections of this process re-authenticated their
// SASL session (KIP-368). It is safe for concurrent use.
func Reauthentications() int64 { return reauthentications.Load() }

// Clone returns a deep copy of r that stays valid after the read that handed r out goes on: for
// the tests, which keep what they read.
func (r *Record) Clone() Record {
	c := *r
	c.Key, c.Value = bytes.Clone(r.Key), bytes.Clone(r.Value)
	if len(r.Headers) > 0 {
		c.Headers = make([]Header, len(r.Headers))
		for i, h := range r.Headers {
			c.Headers[i] = Header{Key: h.Key, Value: bytes.Clone(h.Value)}
		}
	}
	return c
}
