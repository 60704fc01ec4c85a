package dedup

import "time"

// ClockSkewBound is how far a restored snapshot's creation time may lie ahead of the local clock
// before a restore logs a warning. The snapshot was taken by its saver's clock: one that lies
// ahead of this worker's means the clocks of the two replicas disagree by at least that much.
// Under ClockProcessing a filter ages by the local clock, so replicas whose clocks disagree by δ
// keep identities δ longer or shorter than the window after a handover: a new owner whose clock
// runs δ ahead expires them up to δ early (their duplicates pass), one whose clock runs behind
// keeps them δ longer. kdedup assumes replica clocks agree within this bound (NTP keeps them
// within milliseconds); only a clock behind the saver's can be seen at a restore, and it is
// exported (CheckpointObserver.ClockSkew) whatever its size.
const ClockSkewBound = time.Second

// checkSkew compares the creation time of unit's restored snapshot with the local clock: it
// reports the skew to the Observer and logs one beyond ClockSkewBound.
func (s *Set) checkSkew(unit string, created time.Time) {
	if created.IsZero() {
		return
	}
	skew := created.Sub(time.Now())
	if s.cfg.Observer != nil {
		s.cfg.Observer.ClockSkew(skew)
	}
	if skew > ClockSkewBound {
		s.cfg.Logger.Warn("the restored snapshot was created after this worker's clock says it is now: the replicas' clocks disagree; identities are kept or expired up to the skew off the window",
			"unit", unit, "skew", skew.String(), "bound", ClockSkewBound.String())
	}
}
