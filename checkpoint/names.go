package checkpoint

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Names and numbering, shared by every backend.
//
// A unit's objects are named "<unit>.<suffix>". A snapshot is "<unit>.<seq>.snap", seq a
// zero-padded 20-digit number (see Info.Seq), so that names sort in number order; the name
// determines its unit (strip the fixed-length tail), so units that prefix each other ("orders",
// "orders.p3") never mix. Other suffixes are free for other kinds of object of a unit; List and
// Prune ignore them.

// ErrBadUnit is wrapped by errors about invalid unit or snapshot names.
var ErrBadUnit = errors.New("checkpoint: invalid unit name")

const (
	// maxUnitLen bounds unit names; it leaves room for the sequence number and suffix, and for a
	// temporary file's suffix (see DirBackend), within the usual 255-byte file name limit.
	maxUnitLen = 200
	// maxNameLen bounds object names: a unit, a dot and a suffix of up to 29 bytes.
	maxNameLen = maxUnitLen + 30
	// seqDigits is the width of the zero-padded sequence number in snapshot names.
	seqDigits = 20
	// snapSuffix ends every snapshot name.
	snapSuffix = ".snap"
)

// ValidateUnit reports whether unit is a valid unit name: 1 to 200 bytes of ASCII letters,
// digits, '.', '_' and '-', not starting with '.'. These are exactly Kafka's topic name
// characters, so "<topic>.p<partition>" is always valid; path separators, "..", and hidden names
// are not. The error wraps ErrBadUnit.
func ValidateUnit(unit string) error {
	return validateName("unit", unit, maxUnitLen)
}

// validateName checks a unit or object name of at most maxLen bytes.
func validateName(what, name string, maxLen int) error {
	if name == "" || len(name) > maxLen {
		return fmt.Errorf("%w: %s %q must be 1 to %d bytes", ErrBadUnit, what, name, maxLen)
	}
	if name[0] == '.' {
		return fmt.Errorf("%w: %s %q must not start with '.'", ErrBadUnit, what, name)
	}
	for i := 0; i < len(name); i++ {
		c := name[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-') {
			return fmt.Errorf("%w: %s %q contains %q (allowed: letters, digits, '.', '_', '-')", ErrBadUnit, what, name, c)
		}
	}
	return nil
}

// validObject checks an object name a Backend is given.
func validObject(name string) error { return validateName("object", name, maxNameLen) }

func snapName(unit string, seq uint64) string {
	return fmt.Sprintf("%s.%0*d%s", unit, seqDigits, seq, snapSuffix)
}

// parseSnapName returns the sequence number if name is a snapshot of unit.
func parseSnapName(unit, name string) (uint64, bool) {
	rest, ok := strings.CutPrefix(name, unit+".")
	if !ok {
		return 0, false
	}
	digits, ok := strings.CutSuffix(rest, snapSuffix)
	if !ok || len(digits) != seqDigits || !allDigits(digits) {
		return 0, false
	}
	seq, err := strconv.ParseUint(digits, 10, 64)
	return seq, err == nil
}

func allDigits(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}

// nextSeq returns the number of a snapshot saved at now after the unit's existing ones: now in
// unix nanoseconds, or one above the highest existing number if that is not below. So a number
// is above every snapshot visible when it was chosen whatever the clocks say (a restarted
// process, a replica whose clock lags, a snapshot from a clock that ran ahead), and numbers
// chosen one after the other under the unit's lock strictly increase.
func nextSeq(existing []Info, now time.Time) uint64 {
	seq := uint64(max(now.UnixNano(), 0))
	for _, e := range existing {
		if e.Seq >= seq {
			seq = e.Seq + 1
		}
	}
	return seq
}
