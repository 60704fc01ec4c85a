package tier

import (
	"flag"
	"testing"
	"time"
)

func TestEnabled(t *testing.T) {
	for _, c := range []struct {
		env, tier string
		want      bool
	}{
		{"", "unit", true},
		{"", "integration", false},
		{"integration", "integration", true},
		{"integration", "process", false},
		{"statistical, process", "process", true},
		{"all", "statistical", true},
		{"real", "integration", true},
		{"integration", "real", false},
	} {
		t.Setenv(Env, c.env)
		if got := Enabled(c.tier); got != c.want {
			t.Errorf("%s=%q: Enabled(%q) = %v, want %v", Env, c.env, c.tier, got, c.want)
		}
	}
}

func TestCheck(t *testing.T) {
	if bad := check("unit,integration, all,"); len(bad) != 0 {
		t.Errorf("check of valid tiers = %q", bad)
	}
	if bad := check("integration,intergation"); len(bad) != 1 || bad[0] != "intergation" {
		t.Errorf("check of a misspelt tier = %q", bad)
	}
}

func TestPatience(t *testing.T) {
	for _, c := range []struct {
		env  string
		want time.Duration
	}{
		{"", 3 * time.Second},
		{"1", time.Second},
		{"2.5", 2500 * time.Millisecond},
		{"0", 3 * time.Second},
		{"-1", 3 * time.Second},
		{"slow", 3 * time.Second},
	} {
		t.Setenv(PatienceEnv, c.env)
		if got := Patience(time.Second); got != c.want {
			t.Errorf("%s=%q: Patience(1s) = %v, want %v", PatienceEnv, c.env, got, c.want)
		}
	}
}

// TestWaitingParallel checks that WaitingParallel sets -test.parallel when the command line did
// not give it, and leaves the command line's value otherwise. (The tests of this run already
// read the value, so changing it here changes nothing else.)
func TestWaitingParallel(t *testing.T) {
	f := flag.Lookup("test.parallel")
	given := false
	flag.Visit(func(g *flag.Flag) { given = given || g.Name == "test.parallel" })
	before := f.Value.String()
	WaitingParallel(7)
	want := "7"
	if given {
		want = before
	}
	if got := f.Value.String(); got != want {
		t.Errorf("-test.parallel = %s after WaitingParallel(7), want %s (given on the command line: %v)", got, want, given)
	}
}
