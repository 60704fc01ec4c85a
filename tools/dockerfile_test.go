package tools

import (
	"bytes"
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/client/llb"
	"github.com/moby/buildkit/client/llb/sourceresolver"
	"github.com/moby/buildkit/frontend/dockerfile/dockerfile2llb"
	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/buildkit/frontend/subrequests/lint"
	digest "github.com/opencontainers/go-digest"
)

// offlineResolver answers image metadata lookups with an empty linux/amd64
// image config, so that the linter runs without a registry.
type offlineResolver struct{}

func (offlineResolver) ResolveImageConfig(_ context.Context, ref string, _ sourceresolver.Opt) (string, digest.Digest, []byte, error) {
	cfg := []byte(`{"architecture":"amd64","os":"linux","config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"]},"rootfs":{"type":"layers","diff_ids":[]}}`)
	return ref, digest.FromBytes(cfg), cfg, nil
}

// lintDockerfile runs the BuildKit Dockerfile checks (the ones `docker build
// --check` runs) over every stage and returns one line per warning or error.
func lintDockerfile(dt []byte) ([]string, error) {
	sm := llb.NewSourceMap(nil, "Dockerfile", "Dockerfile", dt)
	sm.Definition = &llb.Definition{}
	res, err := dockerfile2llb.DockerfileLint(context.Background(), dt, dockerfile2llb.ConvertOpt{
		SourceMap:    sm,
		MetaResolver: offlineResolver{},
	})
	if err != nil {
		return nil, err
	}
	return lintProblems(res), nil
}

func lintProblems(res *lint.LintResults) []string {
	var out []string
	for _, w := range res.Warnings {
		line := 0
		if w.Location != nil && len(w.Location.Ranges) > 0 {
			line = int(w.Location.Ranges[0].Start.Line)
		}
		out = append(out, fmt.Sprintf("line %d: %s: %s", line, w.RuleName, w.Detail))
	}
	if res.Error != nil {
		out = append(out, "error: "+res.Error.Message)
	}
	return out
}

func TestDockerfileLint(t *testing.T) {
	problems, err := lintDockerfile(readFile(t, deployPath("Dockerfile")))
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("deploy/Dockerfile: %s", p)
	}
}

func TestDockerfileLintCatchesProblems(t *testing.T) {
	tests := []struct {
		name, dockerfile, wantRule string
	}{
		{"shell-form CMD", "FROM scratch\nCMD /kdedup run\n", "JSONArgsRecommended"},
		{"stage name casing", "FROM golang:1.26 AS Build\nFROM scratch\nCOPY --from=Build /x /x\n", "StageNameCasing"},
		{"undefined variable", "FROM scratch\nENV A=$UNDEFINED_THING\n", "UndefinedVar"},
		{"secret in ENV", "FROM scratch\nENV KAFKA_PASSWORD=hunter2\n", "SecretsUsedInArgOrEnv"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			problems, err := lintDockerfile([]byte(tt.dockerfile))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.wantRule) }) {
				t.Errorf("problems %q do not include %s", problems, tt.wantRule)
			}
		})
	}
}

func parseDockerfile(t *testing.T) []instructions.Stage {
	t.Helper()
	ast, err := parser.Parse(bytes.NewReader(readFile(t, deployPath("Dockerfile"))))
	if err != nil {
		t.Fatal(err)
	}
	stages, _, err := instructions.Parse(ast.AST, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(stages) < 2 {
		t.Fatalf("%d stages, want a multi-stage build", len(stages))
	}
	return stages
}

// dockerfileRuntimeEnv returns the ENV names set in the final (runtime) stage.
// ENV in the build stage (CGO_ENABLED, GOOS, GOFLAGS) configures the Go
// toolchain, not kdedup, and is not checked against env-vars.txt.
func dockerfileRuntimeEnv(t *testing.T) map[string]string {
	t.Helper()
	stages := parseDockerfile(t)
	env := map[string]string{}
	for _, c := range stages[len(stages)-1].Commands {
		if e, ok := c.(*instructions.EnvCommand); ok {
			for _, kv := range e.Env {
				env[kv.Key] = kv.Value
			}
		}
	}
	return env
}

func TestDockerfileEnvVarsAreAccepted(t *testing.T) {
	env := dockerfileRuntimeEnv(t)
	checkEnvNames(t, "deploy/Dockerfile", slices.Sorted(func(yield func(string) bool) {
		for k := range env {
			if !yield(k) {
				return
			}
		}
	}))
}

func TestDockerfileShape(t *testing.T) {
	stages := parseDockerfile(t)
	build, final := stages[0], stages[len(stages)-1]
	if !strings.HasPrefix(build.BaseName, "golang:") {
		t.Errorf("build stage is FROM %s, want golang:", build.BaseName)
	}
	if !strings.HasPrefix(final.BaseName, "gcr.io/distroless/static") && final.BaseName != "scratch" {
		t.Errorf("runtime stage is FROM %s, want distroless static or scratch", final.BaseName)
	}
	var buildCmds strings.Builder
	for _, c := range build.Commands {
		fmt.Fprintln(&buildCmds, c)
	}
	for _, want := range []string{"CGO_ENABLED=0", "./cmd/kdedup"} {
		if !strings.Contains(buildCmds.String(), want) {
			t.Errorf("build stage does not contain %q", want)
		}
	}
	var user string
	var exposed, volumes []string
	var health *instructions.HealthCheckCommand
	for _, c := range final.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.VolumeCommand:
			volumes = append(volumes, c.Volumes...)
		case *instructions.HealthCheckCommand:
			health = c
		}
	}
	if user == "" || user == "root" || strings.HasPrefix(user, "0") {
		t.Errorf("runtime stage USER %q, want a non-root user", user)
	}
	if !slices.Contains(exposed, "8080") {
		t.Errorf("EXPOSE %v, want 8080", exposed)
	}
	if dir := dockerfileRuntimeEnv(t)["CHECKPOINT_DIR"]; dir == "" || !slices.Contains(volumes, dir) {
		t.Errorf("VOLUME %v does not include CHECKPOINT_DIR %q", volumes, dir)
	}
	if health == nil || !slices.Equal(health.Health.Test, []string{"CMD", "/usr/local/bin/kdedup", "healthcheck"}) {
		t.Errorf("HEALTHCHECK = %+v, want CMD [/usr/local/bin/kdedup healthcheck]", health)
	}
}
