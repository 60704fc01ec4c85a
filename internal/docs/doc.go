// Package docs keeps the repository's documents in step with the code. It owns the module's
// import rules as data (Rules, BrokerLinkers): README.md's list of them is generated from the
// table (RulesMarkdown, between the import-rules markers) and the package's tests check the table
// against go list. It also replaces the generated blocks of a markdown document (ReplaceBlock, as
// `kdedup envdoc -update` does for the configuration table) and checks that the relative links and
// anchors of the repository's markdown files (README.md, docs/) resolve (CheckLinks).
//
// Regenerate README.md's import rules with:
//
//	go test ./internal/docs -run TestREADMEImportRules -update
//
// The package imports nothing of kdedup; its functions are safe for concurrent use.
package docs
