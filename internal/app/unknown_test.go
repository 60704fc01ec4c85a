package app

import (
	"reflect"
	"testing"
)

// TestUnknownVars proves that a variable with a contract prefix kdedup does not know is reported
// with the closest known one, and that known variables (the _FILE forms included) and other
// prefixes are not.
func TestUnknownVars(t *testing.T) {
	got := UnknownVars(withEnv(map[string]string{
		"DEDUP_WINDOW_CONT": "4", "KAFKA_SASL_PASWORD": "x", "CHECKPOINT_INTERVALL": "1m",
		"KAFKA_SASL_PASSWORD_FILE": "/run/pw", "AWS_REGION": "eu-west-1", "HOME": "/root", "KDEDUP_TEST_LOGS": "/tmp",
	}))
	want := []UnknownVar{
		{"CHECKPOINT_INTERVALL", "CHECKPOINT_INTERVAL"},
		{"DEDUP_WINDOW_CONT", "DEDUP_WINDOW_COUNT"},
		{"KAFKA_SASL_PASWORD", "KAFKA_SASL_PASSWORD"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("UnknownVars = %v, want %v", got, want)
	}
	for _, tc := range []struct {
		a, b string
		d    int
	}{{"", "", 0}, {"abc", "", 3}, {"kitten", "sitting", 3}, {"CONT", "COUNT", 1}} {
		if d := editDistance(tc.a, tc.b); d != tc.d {
			t.Errorf("editDistance(%q, %q) = %d, want %d", tc.a, tc.b, d, tc.d)
		}
	}
}
