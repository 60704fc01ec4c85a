package app

import (
	"context"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/window"
)

// memoryLimitShare is the share of the container's memory limit that DEDUP_MEMORY_LIMIT takes by
// default: the rest is for the Go runtime, the input buffers of the assigned partitions and the
// producer.
const memoryLimitShare = 0.5

// defaultMemoryLimit is DEDUP_MEMORY_LIMIT's default where no cgroup memory limit is found: 4 GiB.
const defaultMemoryLimit = 4 << 30

// cgroupRoot is where the worker looks for its cgroup's memory limit; tests replace it.
var cgroupRoot = "/sys/fs/cgroup"

// noCgroupLimit is the least cgroup v1 limit read as "no limit": v1 reports an unlimited group
// as a page-rounded maximum int64.
const noCgroupLimit = 1 << 62

// cgroupMemoryLimit returns the memory limit of the worker's cgroup under root: cgroup v2's
// memory.max, else cgroup v1's memory/memory.limit_in_bytes. ok is false when neither file is
// readable, or the limit is "max" (v2) or unlimited (v1).
func cgroupMemoryLimit(root string) (limit uint64, ok bool) {
	for _, name := range []string{"memory.max", filepath.Join("memory", "memory.limit_in_bytes")} {
		b, err := os.ReadFile(filepath.Join(root, name))
		if err != nil {
			continue
		}
		s := strings.TrimSpace(string(b))
		if s == "max" {
			return 0, false
		}
		n, err := strconv.ParseUint(s, 10, 64)
		if err != nil || n == 0 || n >= noCgroupLimit {
			return 0, false
		}
		return n, true
	}
	return 0, false
}

// MemoryBudget returns DEDUP_MEMORY_LIMIT in bytes and where it comes from: "DEDUP_MEMORY_LIMIT"
// when set, else memoryLimitShare of the cgroup memory limit ("cgroup limit N"), else
// defaultMemoryLimit ("default, no cgroup limit").
func (d DedupConfig) MemoryBudget() (bytes uint64, source string) {
	if d.MemoryLimit > 0 {
		return uint64(d.MemoryLimit), "DEDUP_MEMORY_LIMIT"
	}
	if limit, ok := cgroupMemoryLimit(cgroupRoot); ok {
		return max(uint64(float64(limit)*memoryLimitShare), 1), fmt.Sprintf("%g of the cgroup memory limit %d", memoryLimitShare, limit)
	}
	return defaultMemoryLimit, "default, no cgroup memory limit"
}

// Input memory inside the budget: the input buffers of the worker's fetches (every broker's
// response frame and every assigned partition's fetched answers) take inputMemoryShare of
// DEDUP_MEMORY_LIMIT, at most maxInputMemory; the filters share the rest.
const (
	inputMemoryShare = 0.25
	maxInputMemory   = 32 << 20
)

// InputMemory returns the bytes of DEDUP_MEMORY_LIMIT that the input buffers may hold (the
// fetch pool's MaxBufferedBytes).
func (d DedupConfig) InputMemory() uint64 {
	n, _ := d.MemoryBudget()
	return min(uint64(float64(n)*inputMemoryShare), maxInputMemory)
}

// FilterMemory returns the bytes of DEDUP_MEMORY_LIMIT the filters share: the budget less
// InputMemory.
func (d DedupConfig) FilterMemory() uint64 {
	n, _ := d.MemoryBudget()
	return max(n-d.InputMemory(), 1)
}

// newBudget returns the filters' memory budget, FilterMemory of DEDUP_MEMORY_LIMIT.
func newBudget(d DedupConfig) *window.Budget {
	b, err := window.NewBudget(d.FilterMemory())
	if err != nil { // FilterMemory is never 0
		panic(err)
	}
	return b
}

// The process around the budget. DEDUP_MEMORY_LIMIT is the memory of the filters and of the
// input buffers; the rest of the process (the Go runtime and the collector's headroom, the
// readers' record and header slices, the producer's buffers, checkpoint writes, the HTTP server,
// the binary itself) needs up to processOverhead more. Without GOMEMLIMIT the worker sets the Go
// runtime's soft memory limit itself (RuntimeMemoryLimit), so that the collector runs before
// its headroom takes the process past that, instead of letting the heap grow to twice what was
// live at the last collection (GOGC=100). The runtime's memory is what the process holds less
// what the runtime does not manage: the filters where they are mapped outside the Go heap
// (window.FiltersMapped, on Linux), and the binary's mapped text and data (the process's
// file-backed resident memory, RssFile in /proc/self/status: about 23 MiB for this binary once
// its code has run; at least nonRuntimeMemory, which is also what is assumed where it cannot be
// read). So the limit is the input buffers' share plus processOverhead less that file-backed
// memory and limitReserve, plus what the filters hold (at most their share) where they are in the
// Go heap. It follows the filters and the mapped text every runtimeLimitPeriod.
const (
	processOverhead    = 64 << 20
	nonRuntimeMemory   = 16 << 20
	runtimeLimitPeriod = time.Second
)

// limitMargin is what the runtime's soft limit leaves below the process's bound for the
// collector's pacing: at the budget the heap grows to the soft limit (its GOGC goal lies past
// it), and allocation during a cycle takes it a few MiB past for a moment. Without it, a worker
// whose filters held their whole share measured 1 MiB over the budget plus processOverhead.
// The limit leaves out one fetch response frame as well (kafkaio.MaxRequestBytes of the input
// share, 8 MiB at the largest input share; see limitReserve).
const limitMargin = 4 << 20

// limitReserve returns what the runtime's soft limit leaves below the process's bound:
// limitMargin and the largest buffer the input path makes at once, a response frame of one
// fetch request (kafkaio.MaxRequestBytes of InputMemory). The collector can act on such an
// allocation only after it is made, and at the input share's limit the frame it replaces stays
// in the Go heap until the next cycle; with the soft limit at the whole of processOverhead,
// the process measured 315-322 MiB at a 256 MiB budget (bound 320 MiB) with the heap at the
// limit, and 303 MiB with the limit 8 MiB lower.
func (d DedupConfig) limitReserve() int64 {
	return limitMargin + kafkaio.MaxRequestBytes(int64(min(d.InputMemory(), math.MaxInt64)))
}

// procStatus is the file fileResident reads; tests replace it.
var procStatus = "/proc/self/status"

// fileResident returns the process's file-backed resident memory (RssFile of procStatus, mostly
// the binary's text) and at least nonRuntimeMemory; nonRuntimeMemory when it cannot be read.
func fileResident() uint64 {
	b, err := os.ReadFile(procStatus)
	if err != nil {
		return nonRuntimeMemory
	}
	for _, line := range strings.Split(string(b), "\n") {
		v, ok := strings.CutPrefix(line, "RssFile:")
		if !ok {
			continue
		}
		kb, err := strconv.ParseUint(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil || kb > math.MaxUint64>>10 {
			return nonRuntimeMemory
		}
		return max(kb<<10, nonRuntimeMemory)
	}
	return nonRuntimeMemory
}

// runtimeLimitManaged says that the worker sets the runtime's soft memory limit (the worker's
// command called SetRuntimeMemoryLimit and GOMEMLIMIT is not set); tests that run the worker
// in-process leave it off.
var runtimeLimitManaged atomic.Bool

// RuntimeMemoryLimit returns the soft memory limit the worker sets for the Go runtime when
// GOMEMLIMIT is not set, its filters hold filterBytes and outside bytes of the process's resident
// memory are file-backed (fileResident): InputMemory plus processOverhead less outside (outside
// taken as at least nonRuntimeMemory and at most processOverhead less minRuntimeOverhead) less
// limitReserve, plus filterBytes (at most FilterMemory) where the filters are in the Go heap (not
// window.FiltersMapped). ok is false when GOMEMLIMIT is set (to anything, "off" included): the
// runtime read it and it is left alone.
func (c Config) RuntimeMemoryLimit(filterBytes, outside uint64) (limit int64, ok bool) {
	if c.GoMemLimit != "" {
		return 0, false
	}
	if window.FiltersMapped {
		filterBytes = 0
	}
	outside = min(max(outside, nonRuntimeMemory), processOverhead-minRuntimeOverhead)
	n := min(filterBytes, c.Dedup.FilterMemory()) + c.Dedup.InputMemory()
	return int64(min(n, math.MaxInt64-processOverhead)) + processOverhead - int64(outside) - c.Dedup.limitReserve(), true
}

// minRuntimeOverhead is the least of processOverhead the runtime's soft limit keeps beyond the
// filters and the input share, whatever the binary's mapped text measures.
const minRuntimeOverhead = 16 << 20

// SetRuntimeMemoryLimit sets the Go runtime's soft memory limit to RuntimeMemoryLimit for the
// whole budget when GOMEMLIMIT is not set, and has the worker's filters' budget move it with
// what they hold from then on (see followBudget). It returns the limit in force. It changes the
// whole process: the worker's command calls it, tests that run the worker in-process do not.
func SetRuntimeMemoryLimit(c Config) int64 {
	if limit, ok := c.RuntimeMemoryLimit(math.MaxUint64, fileResident()); ok {
		debug.SetMemoryLimit(limit)
		runtimeLimitManaged.Store(true)
	}
	return debug.SetMemoryLimit(-1)
}

// followBudget sets the runtime's soft memory limit to RuntimeMemoryLimit for what the filters
// of b hold and the process's file-backed resident memory, every runtimeLimitPeriod until ctx ends, when SetRuntimeMemoryLimit made the worker
// manage it; else it does nothing.
func followBudget(ctx context.Context, c Config, b *window.Budget) {
	if !runtimeLimitManaged.Load() {
		return
	}
	t := time.NewTicker(runtimeLimitPeriod)
	defer t.Stop()
	last := int64(-1)
	for {
		if limit, _ := c.RuntimeMemoryLimit(b.Used(), fileResident()); limit != last {
			debug.SetMemoryLimit(limit)
			last = limit
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
