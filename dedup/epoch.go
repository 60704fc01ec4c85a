package dedup

// Owner epochs.
//
// Every snapshot records the owner epoch of the replica that saved it (SnapshotInfo.OwnerEpoch),
// so that the store can refuse or ignore the saves of a replica that lost the unit without
// knowing it (checkpoint.ErrFenced, checkpoint.Store.Snapshots). An owner epoch must grow with
// every change of owner. kdedup's source of ownership is the consumer group generation
// (Set.Generation), which grows at the coordinator with every rebalance of a group; but it is per
// group, and starts again at 1 when a group is deleted and created again (or the unit's store is
// shared with another group), which would make a new owner's epoch lower than an old one's. So
// the owner epoch of an assignment is the highest epoch among the unit's snapshots when the
// replica got the unit, plus the generation: a replica that gets the unit later, in a later
// generation, lists at least what an earlier owner listed and has a larger generation, so its
// epoch is strictly larger, whatever happened to the group before. A Set outside any generation
// (no Generation call yet) uses generation 0: it saves at the highest epoch it listed, which
// orders its saves with the previous owner's by their numbers, as before epochs.
//
// The global filter's floor is read when it is prepared (NewSet, or a rebuild); its epoch is
// that floor plus the current generation.

// ownerEpoch returns the owner epoch of an assignment in the current generation of a unit whose
// snapshots' highest owner epoch is floor.
func (s *Set) ownerEpoch(floor uint64) uint64 { return floor + uint64(s.gen.Load()) }
