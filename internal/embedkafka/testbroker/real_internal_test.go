package testbroker

import (
	"errors"
	"testing"
)

// TestExitedWhileStarting checks that a node that exited because a port it was given was taken,
// and only such a node, is told apart (errPortTaken), so that StartReal starts the cluster again
// on new ports; a bind failure logged before the node's start does not count.
func TestExitedWhileStarting(t *testing.T) {
	const bind = "Caused by: java.net.BindException: Address already in use\n"
	for _, tc := range []struct {
		name  string
		log   string
		from  int64
		taken bool
	}{
		{"port taken", "starting\n" + bind, 0, true},
		{"port taken after an earlier run", bind + "starting\n" + bind, int64(len(bind)), true},
		{"bind failure of an earlier run only", bind + "starting\nout of memory\n", int64(len(bind)), false},
		{"another failure", "starting\nInconsistentClusterIdException\n", 0, false},
		{"empty log", "", 0, false},
		{"offset past the log", bind, 1 << 20, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := exitedWhileStarting(1, "server.log", []byte(tc.log), tc.from)
			if err == nil {
				t.Fatal("no error")
			}
			if got := errors.Is(err, errPortTaken); got != tc.taken {
				t.Errorf("errors.Is(errPortTaken) = %v, want %v: %v", got, tc.taken, err)
			}
		})
	}
}
