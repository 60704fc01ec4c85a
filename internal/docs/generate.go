package docs

// The module's generated artifacts, regenerated together by `go generate ./...` from the module
// root (each line runs in this directory; -C makes the go command run at the root). Each has a
// test that fails when it drifts from its source, and TestGenerateListsEveryArtifact holds this
// list to Artifacts.

//go:generate go run -C ../.. ./cmd/kdedup envdoc -update README.md
//go:generate sh -c "cd ../.. && go run ./cmd/kdedup envdoc -names > deploy/env-vars.txt"
//go:generate go test -C ../.. ./metrics -run ^TestMetricNamesFile$ -update
//go:generate go test -C ../.. ./internal/app -run ^TestConsumerDefaultsFile$ -update
//go:generate go test -C ../.. ./internal/docs -run ^TestREADMEImportRules$ -update
//go:generate go test -C ../.. ./internal/docs -run ^TestREADMEHeadline$ -update
//go:generate go test -C ../.. ./checkpoint/snapshot -run ^TestGolden -update
//go:generate go test -C ../.. ./window -run ^TestLayoutTable$ -update-layouts -timeout 30m

// Artifact is one generated file: what it is, and the test that fails when it drifts.
type Artifact struct {
	Path      string // relative to the module root
	What      string
	DriftTest string // package and test
}

// Artifacts are the module's generated files.
var Artifacts = []Artifact{
	{"README.md", "the configuration table (between the env-table markers), from internal/app's env structs", "cmd/kdedup TestREADMEEnvTable"},
	{"deploy/env-vars.txt", "every variable's name, which the tools module checks the chart and compose files against", "cmd/kdedup TestDeployEnvVars"},
	{"deploy/metric-names.txt", "every metric's name, which the tools module checks the dashboard and alerts against", "metrics TestMetricNamesFile"},
	{"consumer/appdefaults_test.go", "the worker Config of the env structs' defaults, which consumer's tests start from", "internal/app TestConsumerDefaultsFile"},
	{"README.md", "the import rules (between the import-rules markers), from Rules", "internal/docs TestREADMEImportRules"},
	{"README.md", "the headline figures (between the headline markers), from docs/performance.md's rows", "internal/docs TestREADMEHeadline"},
	{"checkpoint/snapshot/testdata/golden-v*.snap", "one snapshot per single-file version, which the decoder must keep reading", "checkpoint/snapshot TestGolden"},
	{"window/layouttable.go", "the filter's layout per false-positive target, from a search over layouts (a few minutes)", "window TestLayoutTable"},
}
