package snapshot

import (
	"encoding/binary"
	"fmt"
	"math/bits"
)

// The compact encoding of a generation object's words (see GenDecoder for the layout): each
// section is cut into chunks of ChunkWords words, and each chunk is stored the cheapest of three
// ways. A chunk with no bit set costs nothing beyond a run count shared with its empty
// neighbours; a sparse chunk stores the gaps between its set bits in a Rice code; a dense one
// stores its words as they are. A lightly loaded generation is mostly empty chunks and short Rice
// streams, so its size follows the keys it holds, and a full one is raw words that decode at the
// speed of a copy.

// ChunkWords is the number of words of one chunk of a generation object's data.
const ChunkWords = 512

// chunkBits is the number of bit positions of a full chunk.
const chunkBits = ChunkWords * 64

// Chunk modes: the first byte of a chunk record.
const (
	modeEmpty = 0 // a run of empty chunks: uvarint count
	modeRaw   = 1 // the chunk's words, little-endian
	modeRice  = 2 // modeRice+k: Rice code with parameter k of the gaps between set bits
)

// Rice code of a gap g (the number of clear bits before the next set bit, counting from the
// previous set bit, or from the chunk's start for the first): q = g>>k zero bits, a one bit, and
// the k low bits of g, least significant bit first in a little-endian bit stream. A quotient of
// riceEscape or more is written as riceEscape zero bits, a one bit and g in escapeBits bits, so
// that the few long gaps of a sparse chunk (between the blocks of two keys) do not cost their
// quotient in unary.
const (
	maxRiceK   = 15
	riceEscape = 24
	escapeBits = 15 // bits.Len(chunkBits - 1)
	maxCode    = riceEscape + 1 + escapeBits
)

// riceWorthIt is the share of a raw chunk a Rice stream must stay under to be used: a stream that
// saves less than an eighth is not worth its slower decoding.
const riceWorthIt = 7.0 / 8

// riceMaxDensity is the share of set bits above which a chunk is not Rice-coded: the entropy of
// bits spread at random at that density, H(0.295) = 0.875 bits per bit, is riceWorthIt, so no
// code of their gaps saves an eighth (a Rice code of geometric gaps comes within a few percent of
// it). A Bloom filter's bits are spread at random; a generation near its capacity is 40-50% set,
// and skipping the attempt keeps its encoding at the speed of a copy.
const riceMaxDensity = 0.295

// chunkEncoder encodes chunks; it keeps its scratch buffers between chunks.
type chunkEncoder struct {
	gaps   []uint32
	stream []byte
}

// encode appends the record of a chunk of at most ChunkWords words with ones set bits (> 0) to
// dst.
func (c *chunkEncoder) encode(dst []byte, words []uint64, ones int) []byte {
	raw := len(words) * 8
	if float64(ones) < float64(raw*8)*riceMaxDensity {
		c.gaps = c.gaps[:0]
		last := -1
		for i, x := range words {
			for x != 0 {
				p := i<<6 | bits.TrailingZeros64(x)
				x &= x - 1
				c.gaps = append(c.gaps, uint32(p-last-1))
				last = p
			}
		}
		k := bestRiceK(c.gaps)
		c.stream = riceStream(c.stream[:0], c.gaps, k)
		size := 1 + uvarintLen(uint64(len(c.gaps))) + uvarintLen(uint64(len(c.stream))) + len(c.stream)
		if float64(size) < float64(raw)*riceWorthIt {
			dst = append(dst, byte(modeRice+k))
			dst = binary.AppendUvarint(dst, uint64(len(c.gaps)))
			dst = binary.AppendUvarint(dst, uint64(len(c.stream)))
			return append(dst, c.stream...)
		}
	}
	dst = append(dst, modeRaw)
	return appendWords(dst, words)
}

// appendWords appends words little-endian.
func appendWords(dst []byte, words []uint64) []byte {
	if raw := wordBytes(words); raw != nil {
		return append(dst, raw...)
	}
	for _, w := range words {
		dst = binary.LittleEndian.AppendUint64(dst, w)
	}
	return dst
}

func uvarintLen(v uint64) int { return (bits.Len64(v|1) + 6) / 7 }

// bestRiceK returns the Rice parameter that codes gaps in the fewest bits, estimated from the
// histogram of their lengths.
func bestRiceK(gaps []uint32) int {
	var hist [escapeBits + 1]int
	for _, g := range gaps {
		hist[bits.Len32(g)]++
	}
	type bin struct{ l, n int }
	var used [escapeBits + 1]bin // the lengths that occur: a chunk's gaps have a few
	bins := used[:0]
	for l, n := range hist {
		if n != 0 {
			bins = append(bins, bin{l, n})
		}
	}
	best, bestK := int(^uint(0)>>1), 0
	for k := range maxRiceK + 1 {
		size := 0
		for _, b := range bins {
			l, n := b.l, b.n
			q := 0 // the quotient of a gap of bit length l, taken at the middle of its range
			if l > k {
				q = 3 << (l - 1 - k) >> 1
			}
			if q >= riceEscape {
				size += n * maxCode
			} else {
				size += n * (q + 1 + k)
			}
		}
		if size < best {
			best, bestK = size, k
		}
	}
	return bestK
}

// riceStream appends the Rice code of gaps with parameter k to dst, padded with zero bits to a
// whole byte.
func riceStream(dst []byte, gaps []uint32, k int) []byte {
	var acc uint64
	n := uint(0)
	kk := uint(k)
	for _, g := range gaps {
		v, l := uint64(1)<<riceEscape|uint64(g)<<(riceEscape+1), uint(maxCode)
		if q := uint(g) >> kk; q < riceEscape {
			v, l = 1<<q|uint64(g)&(1<<kk-1)<<(q+1), q+1+kk
		}
		acc |= v << n
		if n += l; n >= 64 {
			dst = binary.LittleEndian.AppendUint64(dst, acc)
			n -= 64
			acc = v >> (l - n) // the code's bits that did not fit (none if n == 0: v < 1<<l)
		}
	}
	for ; n > 0; n -= min(n, 8) {
		dst = append(dst, byte(acc))
		acc >>= 8
	}
	return dst
}

// riceDecode sets in dst (cleared, at most ChunkWords words) the n bits whose gaps stream codes
// with parameter k. stream must be padded with at least ricePad zero bytes beyond its length
// streamLen, so that the bit buffer refills with unaligned 8-byte loads. It fails, without a
// sentinel (the caller wraps ErrCorrupt), if the stream is malformed, overruns streamLen, leaves
// whole bytes or set padding bits after its last code, or places a bit beyond dst.
func riceDecode(dst []uint64, stream []byte, streamLen, n, k int) error {
	limit, endBits := len(dst)*64, streamLen*8
	var buf uint64
	have, next, used := uint(0), 0, 0 // bits in buf, next byte to load, bits of codes consumed
	kk := uint(k)
	mask := uint64(1)<<kk - 1
	p, w, acc := -1, 0, uint64(0) // last position, its word and the bits set in that word so far
	for i := range n {
		if have < maxCode {
			buf |= binary.LittleEndian.Uint64(stream[next:]) << have
			next += int(63-have) >> 3
			have |= 56
		}
		q := uint(bits.TrailingZeros64(buf))
		var g, l uint
		switch {
		case q < riceEscape:
			g, l = q<<kk|uint(buf>>(q+1)&mask), q+1+kk
		case q == riceEscape:
			g, l = uint(buf>>(riceEscape+1))&(1<<escapeBits-1), maxCode
		default:
			return fmt.Errorf("rice code %d: unary part too long", i)
		}
		buf >>= l
		have -= l
		used += int(l)
		p += int(g) + 1
		if used > endBits || p >= limit {
			return fmt.Errorf("rice code %d overruns the stream or the chunk", i)
		}
		// Store the word's bits so far rather than OR into memory: a read-modify-write of the
		// word the previous bit went to would wait for that store. acc restarts (without a
		// branch) when the bit is in a new word.
		d := uint64(p>>6 ^ w)
		acc = acc&((d|-d)>>63-1) | 1<<(p&63)
		w = p >> 6
		dst[w] = acc
	}
	if (used+7)/8 != streamLen || used&7 != 0 && stream[used>>3]>>(used&7) != 0 {
		return fmt.Errorf("rice stream of %d bytes ends after %d bits of code", streamLen, used)
	}
	return nil
}

// ricePad is the zero padding riceDecode needs after a stream.
const ricePad = 16
