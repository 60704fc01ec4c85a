package snapshot

import (
	"encoding/binary"
	"unsafe"
)

// nativeLittleEndian is true on little-endian hosts (amd64, arm64, ...),
// where the in-memory representation of a []uint64 is exactly the snapshot's
// data encoding. Tests switch it off to exercise the portable path.
var nativeLittleEndian = binary.NativeEndian.Uint16([]byte{1, 0}) == 1

// wordBytes returns the memory of words as bytes when that memory already
// is the little-endian encoding, so data can move with one bulk copy (read
// or write syscall straight into/out of the caller's slice) instead of a
// per-word conversion; it returns nil on big-endian hosts or for an empty
// slice. This is the package's only use of unsafe: the view covers exactly
// len(words)*8 bytes of a live slice of a pointer-free type and never
// outlives the call that uses it.
func wordBytes(words []uint64) []byte {
	if !nativeLittleEndian || len(words) == 0 {
		return nil
	}
	return unsafe.Slice((*byte)(unsafe.Pointer(&words[0])), len(words)*8)
}

// getWords loads dst from src (len(src) >= 8*len(dst)) little-endian, four
// words per step.
func getWords(dst []uint64, src []byte) {
	for len(dst) >= 4 && len(src) >= 32 {
		d, s := dst[:4:4], src[:32:32]
		d[0] = binary.LittleEndian.Uint64(s[0:8])
		d[1] = binary.LittleEndian.Uint64(s[8:16])
		d[2] = binary.LittleEndian.Uint64(s[16:24])
		d[3] = binary.LittleEndian.Uint64(s[24:32])
		dst, src = dst[4:], src[32:]
	}
	for i := range dst {
		dst[i] = binary.LittleEndian.Uint64(src[i*8:])
	}
}

// wordChunk is the number of words moved per bulk step (256 KiB: large
// enough to amortize calls, small enough to stay in cache while the CRC and
// the copy touch it).
const wordChunk = 32 << 10
