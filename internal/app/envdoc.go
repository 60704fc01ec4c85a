package app

import (
	"fmt"
	"strings"
)

// EnvTableBlock names the generated block of README.md that holds EnvTable, between the markers
// <!-- env-table:start --> and <!-- env-table:end --> (see docs.ReplaceBlock).
const EnvTableBlock = "env-table"

// EnvTable renders Config's environment variables as a markdown table, from the struct tags:
// name, default (*required* or *empty* when there is none) and description, pipes escaped.
func EnvTable() string {
	var b strings.Builder
	b.WriteString("| Variable | Default | Description |\n|---|---|---|\n")
	cell := func(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
	for _, v := range EnvVars() {
		def := "`" + cell(v.Default) + "`"
		switch {
		case v.Required:
			def = "*required*"
		case !v.HasDefault || v.Default == "":
			def = "*empty*"
		}
		desc := v.Desc
		if v.Secret {
			desc += " Or from a file: `" + v.Name + FileSuffix + "` (its path; not with " + v.Name + " set too)."
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", v.Name, def, cell(desc))
	}
	return b.String()
}

// EnvNames lists Config's environment variables, one per line (deploy/env-vars.txt), each
// secret one followed by its NAME_FILE variant.
func EnvNames() string {
	var b strings.Builder
	for _, v := range EnvVars() {
		b.WriteString(v.Name + "\n")
		if v.Secret {
			b.WriteString(v.Name + FileSuffix + "\n")
		}
	}
	return b.String()
}
