package checkpoint

// For the tests of package checkpoint_test (faults_test.go), which import checkpoint/errorfs and
// so cannot be in package checkpoint.
var HeaderForTest = testHeader

// DirNamesForTest lists a directory (contract_test.go).
var DirNamesForTest = dirNames

// The incremental saver of incremental_test.go, for faults_test.go.

// NewSaverForTest returns a saver of unit "u" over s.
var NewSaverForTest = newSaver

// Save saves generations (number → seed of their words), writing those that changed.
func (sv *saver) Save(gens map[uint64]uint64, beforeCommit func(*Txn) error) (Info, SaveStats, error) {
	return sv.save(ckpt(gens), beforeCommit)
}

// LoadGensForTest loads unit "u" as saved by a saver.
func LoadGensForTest(s *Store) (map[uint64]uint64, LoadResult, error) {
	c, res, err := loadCkpt(s)
	return c, res, err
}
