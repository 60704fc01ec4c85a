package app

import (
	"fmt"
	"maps"
	"os"
	"strings"
)

// FileSuffix is appended to the name of a secret variable (a Config field tagged secret:"true")
// to name the variable that holds the path of a file with its value, as Kubernetes mounts
// Secrets: KAFKA_SASL_PASSWORD_FILE=/var/run/secrets/kafka/password.
const FileSuffix = "_FILE"

// SecretVars lists the secret variables of Config: those whose value is never shown (in logs,
// errors, envdoc output) and can come from a file (see ResolveFiles).
func SecretVars() []string {
	var out []string
	for _, v := range EnvVars() {
		if v.Secret {
			out = append(out, v.Name)
		}
	}
	return out
}

// ResolveFiles returns environ with the value of every secret variable NAME whose NAME_FILE is
// set read from that file (one trailing newline removed: files written by echo or an editor).
// Setting both NAME and NAME_FILE is a problem, as is a file that cannot be read; problems are
// returned as "NAME_FILE: message" lines that never hold a value. environ itself is not changed.
func ResolveFiles(environ map[string]string) (map[string]string, []string) {
	out := maps.Clone(environ)
	var problems []string
	for _, name := range SecretVars() {
		path, ok := environ[name+FileSuffix]
		if !ok {
			continue
		}
		if _, both := environ[name]; both {
			problems = append(problems, fmt.Sprintf("%s%s: %s is set too; set only one of them", name, FileSuffix, name))
			continue
		}
		if path == "" {
			problems = append(problems, fmt.Sprintf("%s%s: must not be empty (a file path)", name, FileSuffix))
			continue
		}
		b, err := os.ReadFile(path)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s%s: %v", name, FileSuffix, err))
			continue
		}
		s := strings.TrimSuffix(strings.TrimSuffix(string(b), "\n"), "\r")
		out[name] = s
	}
	return out, problems
}
