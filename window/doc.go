// Package window is a sliding-window Bloom filter: a set of recently seen keys that forgets keys
// after a fixed time, in constant memory, for any number of concurrent goroutines.
//
// # Guarantee
//
// Time is cut into generations of length Interval, counted from the filter's origin, and the
// filter keeps the current generation and the N-1 before it. A key added at time t is reported as
// seen until at least t + (N-1)·Interval, and never after t + N·Interval (plus the scheduling delay
// of the rotation goroutine, which is zero under an injected clock driven with AdvanceTo). Inside
// that window there are no false negatives. A key that was never added is reported as seen with
// probability at most Config.FalsePositiveRate while every generation holds at most
// Config.Capacity distinct keys; past that load the rate grows, and Stats shows it.
//
// For kdedup a false positive is a lost event: a real record dropped as a duplicate. Size the filter
// for the peak distinct-key rate, and watch Stats.EstimatedFPR.
//
// # Layout and concurrency
//
// A key's hash selects a group and a pattern of K bits in a 512-bit block. A group holds one block
// per generation slot, adjacent in memory, so a lookup against all N generations reads N adjacent
// cache lines, and writers to different groups never share a cache line. Groups are the shards by
// key hash: there is no lock and no shared counter on the hot path. An explicit shard, such as one
// Filter per Kafka partition, is simply another Filter; each can be snapshotted and restored on
// its own, and one Filter can equally serve as a single global set shared by all partitions.
//
// Rotation publishes a new immutable view of the live slots with one atomic store; the retired
// slot is cleared later, off the hot path, and never read by an operation that loaded a newer
// view. An operation that loaded a view just before a rotation completes against that view,
// which is equivalent to it having happened just before the rotation.
//
// # Hashing
//
// Keys are hashed with xxhash64 seeded by Config.Seed. The group comes from the hash's high bits
// by multiply-shift range reduction, and the K in-block positions from a SplitMix64 stream over
// its low 48 bits, which avoids the pattern shortage of double hashing inside small blocks.
package window
