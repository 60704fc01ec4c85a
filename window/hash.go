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

// xxhashShort returns xxhash64 of b, shorter than xxhashLong bytes, seeded by seed. It indexes b
// rather than reslicing it, takes two 8-byte lanes at once for keys of 16 bytes or more (the usual
// key), and tests the length's bits for the rest, so that the hash of a short key is a few dozen
// instructions.
func xxhashShort(b []byte, seed uint64) uint64 {
	n := len(b)
	h := seed + xxPrime5 + uint64(n)
	i := 0
	if n >= 16 {
		h = xxMerge8(xxMerge8(h, binary.LittleEndian.Uint64(b[0:8])), binary.LittleEndian.Uint64(b[8:16]))
		i = 16
	}
	// What is left is n mod 16 bytes (n < 32): its bits 3 and 2 say whether 8 and 4 of them are.
	if n&8 != 0 {
		h = xxMerge8(h, binary.LittleEndian.Uint64(b[i:i+8]))
		i += 8
	}
	if n&4 != 0 {
		h ^= uint64(binary.LittleEndian.Uint32(b[i:i+4])) * xxPrime1
		h = bits.RotateLeft64(h, 23)*xxPrime2 + xxPrime3
		i += 4
	}
	for ; i < n; i++ {
		h ^= uint64(b[i]) * xxPrime5
		h = bits.RotateLeft64(h, 11) * xxPrime1
	}
	h ^= h >> 33
	h *= xxPrime2
	h ^= h >> 29
	h *= xxPrime3
	h ^= h >> 32
	return h
}

// xxMerge8 mixes the 8-byte lane k into the xxhash64 state h of a short input.
func xxMerge8(h, k uint64) uint64 {
	k *= xxPrime2
	k = bits.RotateLeft64(k, 31) * xxPrime1
	h ^= k
	return bits.RotateLeft64(h, 27)*xxPrime1 + xxPrime4
}
