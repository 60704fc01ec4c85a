package checkpoint

// For the tests of package checkpoint_test (faults_test.go), which import checkpoint/errorfs and
// so cannot be in package checkpoint.
var HeaderForTest = testHeader
