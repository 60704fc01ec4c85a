package app

import (
	"strings"
	"testing"
)

// TestEnvTable proves the table lists every variable once with its default, marks required ones,
// and escapes pipes inside cells.
func TestEnvTable(t *testing.T) {
	table := EnvTable()
	for _, v := range EnvVars() {
		if n := strings.Count(table, "| `"+v.Name+"` |"); n != 1 {
			t.Errorf("%s appears %d times", v.Name, n)
		}
	}
	for _, want := range []string{
		"| `KAFKA_BROKERS` | *required* |",
		"| `KAFKA_BATCH_TIMEOUT` | `5ms` |",
		"| `DEDUP_WINDOW_COUNT` | `8` |",
		"| `DEDUP_DUPLICATES_TOPIC` | *empty* |",
	} {
		if !strings.Contains(table, want) {
			t.Errorf("table lacks %q", want)
		}
	}
	for i, line := range strings.Split(strings.TrimSpace(table), "\n") {
		if cells := strings.Count(strings.ReplaceAll(line, `\|`, ""), "|"); cells != 4 {
			t.Errorf("line %d has %d unescaped pipes, want 4: %s", i, cells, line)
		}
	}
	if names := EnvNames(); strings.Count(names, "\n") != len(EnvVars())+len(SecretVars()) || !strings.Contains(names, "\nKAFKA_SASL_PASSWORD_FILE\n") || !strings.HasPrefix(names, "KAFKA_BROKERS\n") {
		t.Errorf("EnvNames = %q", names)
	}
}
