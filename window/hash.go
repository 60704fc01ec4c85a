package window

import (
	"encoding/binary"
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// The key hash is xxhash64 seeded by Config.Seed. xxhash's seeded API is its streaming Digest,
// whose Write and Sum64 cost more than the one-shot Sum64 on the short keys of a Kafka stage, so
// hashKey computes the same value itself below xxhashLong bytes (the xxhash64 specification's
// path for inputs of fewer than 32 bytes), takes xxhash.Sum64 for seed 0, and the Digest for
// longer keys with a seed. TestHashKeyMatchesXXHash holds the values equal.

const (
	xxPrime1 uint64 = 11400714785074694791
	xxPrime2 uint64 = 14029467366897019727
	xxPrime3 uint64 = 1609587929392839161
	xxPrime4 uint64 = 9650029242287828579
	xxPrime5 uint64 = 2870177450012600261
)

// xxhashLong is the length from which xxhash64 processes 32-byte stripes.
const xxhashLong = 32

// hashKey returns xxhash64 of key seeded by seed. It is safe for concurrent use.
func hashKey(key []byte, seed uint64) uint64 {
	switch {
	case len(key) < xxhashLong:
		return xxhashShort(key, seed)
	case seed == 0:
		return xxhash.Sum64(key)
	}
	var d xxhash.Digest
	d.ResetWithSeed(seed)
	d.Write(key)
	return d.Sum64()
}

// xxhashShort returns xxhash64 of b, shorter than xxhashLong bytes, seeded by seed.
func xxhashShort(b []byte, seed uint64) uint64 {
	h := seed + xxPrime5 + uint64(len(b))
	for ; len(b) >= 8; b = b[8:] {
		k := binary.LittleEndian.Uint64(b) * xxPrime2
		k = bits.RotateLeft64(k, 31) * xxPrime1
		h ^= k
		h = bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
	}
	if len(b) >= 4 {
		h ^= uint64(binary.LittleEndian.Uint32(b)) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		b = b[4:]
	}
	for _, c := range b {
		h ^= uint64(c) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}
