// Package window is a sliding-window Bloom filter: a set of recently seen keys that forgets keys
// after a fixed time, in constant memory, for any number of concurrent goroutines.
//
// # Guarantee
//
// Time is cut into generations of length Interval, counted from the filter's origin, and the
// filter keeps the current generation and the N-1 before it. A key added at time t is reported as
// seen until at least t + (N-1)·Interval, and never after t + N·Interval (plus the scheduling delay
// of the rotation goroutine, which is zero under an injected clock driven with AdvanceTo). The
// lower bound holds once the filter has rotated to t's generation: a key added while the rotation
// goroutine is late by d goes to the generation before, and is remembered until t - d +
// (N-1)·Interval; a caller that must keep the bound calls AdvanceTo(now) before it adds (kdedup's
// dedup.Set does so before every batch). Inside that window there are no false negatives. A key that was never added is reported as seen with
// probability at most Config.FalsePositiveRate however many distinct keys arrive, as long as
// Config.MaxBytes allows the generations to grow (see Growth); at the cap the filter stops growing,
// Stats.AtCap says so, and Config.Overload decides between a rising rate (OverloadDrop) and keys
// not remembered (OverloadPass). Stats.EstimatedFPR is the rate a new key faces now.
//
// For kdedup a false positive is a lost event: a real record dropped as a duplicate. Size the filter
// for the usual peak distinct-key rate, and the memory cap for the overload it must absorb.
//
// # Growth
//
// Config.Capacity is what a generation's first stage (stage 0, the interleaved layout below)
// holds: a generation grows only once it has taken more than Capacity new keys, never at or below
// it. Stage 0 is sized so that its rate at Capacity keys is (1-GrowthShare)·p_g, p_g being the
// generation's share 1-(1-p)^(1/N) of the target, and it takes exactly Sizing.GrowAt = Capacity
// keys: it counts them in padded counters sharded by the hash's top bits (no shared counter on the
// hot path), and adds up the shards only when one passes its share, so that the shards' chance
// differences never make a generation grow early. Further keys go to stage 1, a separate blocked
// filter for Capacity keys at GrowthShare·p_g/2; stage i holds Capacity·2^(i-1) keys at
// GrowthShare·p_g·2^-i, so a generation's rate stays under (1-GrowthShare)·p_g +
// GrowthShare·p_g·Σ2^-i < p_g at any load, and the window's under p. A grown stage counts its keys
// per shard, and a shard is full at its share of the stage's capacity. A stage is allocated by the
// first writer that needs it and published with a compare-and-swap of an immutable stage list
// before any key is added to it, so a reader never misses a key. Every
// insertion, into any stage, holds the key's stage-0 claim word in shared mode, which keeps exactly
// one winner among concurrent offers of a new key across a stage's creation. Lookups test stage 0
// as before and load one pointer, nil until a generation grows; only grown generations cost more.
// Rotation drops an expired generation's stages, and snapshots carry them.
//
// # Auto sizing
//
// With Config.Auto, Capacity is only the size of stage 0 (AutoCapacity by default, a few KiB),
// which takes 1/16 of p_g. The stage a generation adds when stage 0 fills, stage 1, is sized from
// the load observed: AutoHeadroom times the smaller of the keys the previous generation took and
// the current generation's rate projected over its interval (with no history, at most 8 times
// the keys it holds), at (1-GrowthShare-1/16)·p_g; further stages follow the projection at
// GrowthShare·p_g·2^-(i-1), so a generation's rate stays under p_g at any load. Generations thus
// differ in size and follow the load, and the stages of an expired generation are returned to
// the system at once (see auto.go and grow.go's newStage). A lookup then tests each live
// generation's stage 1 as well: one more cache line per generation.
//
// # Layout
//
// A key's hash selects a group, and a pattern of K bits in a block of S sectors, a sector being
// one 64-byte cache line of eight words: FirstBits of the K bits in one word of sector 0 (the word
// the pattern picks among the eight), the rest spread evenly over the words of sectors 1 … S-1.
// A group holds one block per generation slot. Its sector 0 is stored word-major, generations
// interleaved: word w of sector 0 of every slot side by side, so that the word a key uses in each
// of the N generations sits in one row of N adjacent words, one cache line for N ≤ 8. The other
// sectors are stored sector-major: sector i of every slot side by side.
//
// Testing a new key reads that row and almost always stops there: a key that was never added
// matches FirstBits bits of a half-full word with a probability of a few percent, and only a
// generation whose word matches is tested further, in its other sectors. A key that was added
// reads the row and the S-1 further sectors of its generation, and so does an insertion, which
// writes one word of the row and those sectors. Before this layout (snapshot format v4 and
// earlier) a key spread its bits over all S sectors and sector 0 was stored sector-major, so a
// test read one line per live generation (N lines).
//
// Confining the first bits to one word of 63 costs memory (the load per word varies more than
// the load per sector); spreading the rest over S-1 full sectors wins it back. Size picks S (1 to
// MaxSectors = 6), FirstBits and K per target rate by the exact rate of a generation whose groups hold a
// Poisson number of keys (poissonLoadFPR): at N=8 the layout takes the same memory as the
// earlier one at 1e-3 and 0.5% less at 1e-6. Each generation is sized for the rate
// (1-GrowthShare)·(1-(1-p)^(1/N)) at Capacity, so that the union of N full generations stays under
// p. Groups are the shards by key hash: there is no lock and no shared counter on the hot path,
// and writers to different groups never share a cache line.
//
// There are exactly N slots, one per live generation: no spare slot. Rotation reuses the slot of
// the expiring generation at once, without clearing it first.
//
// # Reusing a slot without clearing it
//
// Every slot has a use counter, bumped each time the slot takes a new generation. The top bit of
// every 64-bit word is a tag: the parity of the use that last wrote the word; the other 63 bits
// are data. A word whose tag differs from its slot's current parity holds bits of an expired
// generation, and reads as empty. Rotation bumps the use of the reused slot, so the whole slot
// reads as empty at once, and publishes a new immutable view of the live slots with one atomic
// store. A writer that meets a stale word replaces it with a word of the current use holding only
// its own bits; a writer that meets a current word ORs its bits in. A background sweep (Start's
// goroutine, or AdvanceTo before it returns) then converts the remaining stale words into empty
// current ones with compare-and-swap, a chunk of groups at a time, so it never overwrites a
// writer's conversion. Until the sweep ends the slot is read with tag checks; afterwards views read
// it without them, as fast as a cleared slot.
//
// Two rules make one parity bit enough. First, at most one slot has a sweep pending, and a
// rotation finishes it before it reuses a slot, so when a slot starts use u+1 every one of its
// words carries the tag of use u: a word with the other tag can only be from use u+1. Second, the
// only write that drops bits, a writer's conversion of a stale word, is fenced against reuse: the
// writer announces itself in a per-slot counter, checks that the slot still holds its view's use,
// and only then swaps; a rotation bumps the use and then waits until no announced conversion of
// that slot is pending before it publishes the new view. With sequentially consistent atomics,
// either the writer sees the bump (and retries with a fresh view) or the rotation sees the writer
// (and waits for its swap, which then fails or converts a word that really is stale). A stale view
// can therefore never wipe a word of a later use, however long its goroutine stalls.
//
// # Concurrency
//
// Test is a handful of atomic loads. In the default shared mode, TestAndAdd on a new
// key takes a per-group claim word by compare-and-swap from the value it read before its test,
// which proves that no other insertion touched the group in between: if several goroutines offer
// the same new key at once, exactly one of them is told it is new. A goroutine that finds the
// claim taken completes that insertion itself, so nobody waits for anybody. Bits are set with
// atomic ORs, skipping words that already hold them.
//
// With Config.SingleWriter (one goroutine calls TestAndAdd at a time, as kdedup does for each
// partition) TestAndAdd takes no claim and sets bits with a plain read and store per word. The
// only other writer of filter words is the sweep, which only converts stale words to empty ones,
// so a store computed from the word the writer read loses nothing. The store is a plain aligned
// 64-bit store: concurrent readers and snapshots load words atomically, and the Go memory model
// guarantees that such a racing load sees the old or the new word; under the race detector the
// store is atomic instead, so the detector checks everything else.
//
// Snapshots copy the words atomically while writers continue; the tags travel with the words, and
// Meta carries every slot's use, so Restore reproduces the filter exactly, even mid-sweep (it
// empties stale words before the filter is used). Stats takes no lock and ignores stale words.
// SnapshotGenerations exports each live generation on its own, in a canonical form without tags
// or interleaving, and RestoreGenerations reads them back; a generation's version
// (GenerationVersion) tells a caller that keeps generations apart which ones changed since it last
// exported them: only the current generation takes new keys, except that an event-time key added
// to an older generation (writeOld) counts in that generation's version.
//
// # Event time
//
// A filter can follow the records' own timestamps instead of a clock: AdvanceEventTo rotates it
// to a stream time the caller keeps (kdedup: the highest record timestamp seen), and
// TestAndAddAt tests a key against every live generation and, if it is new, adds it to the
// generation that contains the record's timestamp, which need not be the current one. An
// out-of-order record then expires by its own time. A record stamped before the oldest live
// generation is late: TestAndAddAt reports it and adds nothing. AdvanceEventTo rotates one
// generation at a time over the last N, so that every generation of the window is live, even
// one no record fell in; a filter created for event time has its origin at EventTimeOrigin, so
// that boundaries are whole multiples of Interval.
//
// Writing a generation other than the current one needs no tag checks and no fence: only the
// current slot can have a pending sweep. A rotation finishes the pending sweep before it reuses a
// slot (advanceLocked calls finishSweepLocked first), and the slot it reuses becomes the current
// one of the view it publishes (curTagged is set only when sweepSlot is the current slot). So
// every word of an older live slot carries its use's tag, and a plain atomic OR (shared mode) or
// a read and store (single writer) of its data bits keeps the tag. The one exception is a writer
// whose view is stale by the time its target generation expires and its slot is reused: its
// bits land in a later use of the slot, where they are either stale (and swept) or a few extra
// bits, never a lost key, as in the residual races below.
//
// In shared mode the claim word serialises insertions into older generations too: its 16 bits
// above the tag hold a generation field of bits.Len(N) bits (0 for the current generation, else
// 1 + e mod N for generation e, unique among N consecutive live generations) and, above it, the
// insertion counter. A goroutine that helps a claimed insertion writes the key into the
// generation the field names, or nowhere if it expired since. The counter that proves that no
// insertion touched the group between a read of the claim word and a compare-and-swap is thus
// 16 - bits.Len(N) bits wide: 13 bits for N = 4, 5 bits at MaxGenerations; a false proof would
// need that many insertions into one group while one goroutine stands between its read and its
// swap.
//
// # Residual races
//
// Two effects remain, both limited to goroutines that stall inside one TestAndAdd for at least
// N-1 whole intervals (any rotation when N = 1), and both only add bits:
//
//   - A writer whose view predates the reuse of its current slot may OR its key's bits into words
//     of the slot's new use. That raises the false-positive rate of those words a little; it
//     never drops a key, and the writer then adds its key to the current generation as well.
//   - In single-writer mode, the writer's store of a word it read before the reuse may put back a
//     word with the old tag that the sweep had already emptied. Its stale bits then read as set
//     in a later use of the slot (a few false-positive bits), never as a lost key.
//
// # Memory
//
// Stage 0 is an anonymous private mapping of its own outside the Go heap (on Linux), unmapped by a
// cleanup when the Filter is garbage collected; every method keeps the Filter reachable while it
// touches the words, and no slice of them leaves the package. Its pages are mapped as writers
// reach them, each with a write before any read (blocks.writeFirst), so that no page is first
// mapped as the shared zero page and then copied; grown stages are populated whole when they are
// made. Stats.ResidentBytes is the part of the memory written so far. See populate.go.
//
// # Hashing
//
// Keys are hashed with xxhash64 seeded by Config.Seed. The group comes from the hash's high bits
// by multiply-shift range reduction, and the bit positions from a SplitMix64 stream over its low 48
// bits (the claim tag, so that a helper can recompute a claimed key's pattern): six positions per
// 64-bit output, each a word and one of its 63 data bits by multiply-shift, which avoids both
// modulo bias and the pattern shortage of double hashing inside small blocks.
package window
