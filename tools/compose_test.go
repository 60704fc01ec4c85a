package tools

import (
	"fmt"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"
)

type composeFile struct {
	Services map[string]composeService `json:"services"`
}

type composeService struct {
	Image string `json:"image"`
	Build *struct {
		Context    string `json:"context"`
		Dockerfile string `json:"dockerfile"`
	} `json:"build"`
	Environment any      `json:"environment"`
	Command     []string `json:"command"`
}

// envNames returns the names in a compose environment, which is either a
// mapping or a list of NAME=value strings.
func (s composeService) envNames() ([]string, error) {
	var names []string
	switch env := s.Environment.(type) {
	case nil:
	case map[string]any:
		for k := range env {
			names = append(names, k)
		}
	case []any:
		for _, e := range env {
			str, ok := e.(string)
			if !ok {
				return nil, fmt.Errorf("environment entry %v is not a string", e)
			}
			name, _, _ := strings.Cut(str, "=")
			names = append(names, name)
		}
	default:
		return nil, fmt.Errorf("environment is %T", env)
	}
	slices.Sort(names)
	return names, nil
}

// runsKdedup tells whether a service runs the kdedup image (built from
// deploy/Dockerfile); other services (Kafka, Prometheus, Grafana) have their
// own variables.
func (s composeService) runsKdedup() bool {
	return (s.Build != nil && strings.HasSuffix(s.Build.Dockerfile, "deploy/Dockerfile")) ||
		strings.HasPrefix(s.Image, "kdedup")
}

func loadCompose(t *testing.T) composeFile {
	t.Helper()
	var c composeFile
	if err := yaml.Unmarshal(readFile(t, deployPath("docker-compose.yml")), &c); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	return c
}

func TestComposeEnvVarsAreAccepted(t *testing.T) {
	c := loadCompose(t)
	var kdedup []string
	for _, name := range slices.Sorted(func(yield func(string) bool) {
		for k := range c.Services {
			if !yield(k) {
				return
			}
		}
	}) {
		svc := c.Services[name]
		if !svc.runsKdedup() {
			continue
		}
		kdedup = append(kdedup, name)
		names, err := svc.envNames()
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		checkEnvNames(t, "docker-compose.yml service "+name, names)
	}
	// The YAML merge key (<<: *kdedup-image) must have carried the build over.
	if !slices.Equal(kdedup, []string{"kdedup", "loadgen"}) {
		t.Errorf("services running the kdedup image = %v, want [kdedup loadgen]", kdedup)
	}
}

func TestComposeEnvNames(t *testing.T) {
	tests := []struct {
		name string
		env  any
		want []string
	}{
		{"mapping", map[string]any{"B": "1", "A": 2}, []string{"A", "B"}},
		{"list", []any{"A=1", "B"}, []string{"A", "B"}},
		{"none", nil, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := composeService{Environment: tt.env}.envNames()
			if err != nil || !slices.Equal(got, tt.want) {
				t.Errorf("envNames = %v, %v; want %v", got, err, tt.want)
			}
		})
	}
}

func TestComposeServices(t *testing.T) {
	c := loadCompose(t)
	for _, name := range []string{"kafka", "kafka-init", "minio", "minio-init", "kdedup", "loadgen", "prometheus", "grafana"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("service %s missing", name)
		}
	}
	if got := c.Services["loadgen"].Command; len(got) == 0 || got[0] != "loadtest" {
		t.Errorf("loadgen command = %v, want the loadtest subcommand", got)
	}
	if img := c.Services["kafka"].Image; !strings.HasPrefix(img, "apache/kafka:") {
		t.Errorf("kafka image %q, want the official apache/kafka image", img)
	}
	for _, name := range []string{"minio", "minio-init"} {
		if img := c.Services[name].Image; !strings.Contains(img, ":RELEASE.") {
			t.Errorf("%s image %q is not pinned to a release", name, img)
		}
	}
}

// TestComposeCheckpointsToMinIO checks that the worker checkpoints to the stack's MinIO, into the
// bucket minio-init creates, with the credentials MinIO is started with.
func TestComposeCheckpointsToMinIO(t *testing.T) {
	c := loadCompose(t)
	env, ok := c.Services["kdedup"].Environment.(map[string]any)
	if !ok {
		t.Fatal("kdedup environment is not a mapping")
	}
	minio, _ := c.Services["minio"].Environment.(map[string]any)
	init := strings.Join(c.Services["minio-init"].Command, "\n")
	url, _ := env["CHECKPOINT_URL"].(string)
	bucket, _, _ := strings.Cut(strings.TrimPrefix(url, "s3://"), "/")
	switch {
	case !strings.HasPrefix(url, "s3://"):
		t.Errorf("CHECKPOINT_URL %q is not an s3:// URL", url)
	case env["CHECKPOINT_DIR"] != nil:
		t.Error("CHECKPOINT_DIR is set too")
	case env["AWS_ENDPOINT_URL_S3"] != "http://minio:9000":
		t.Errorf("AWS_ENDPOINT_URL_S3 = %v, want the minio service", env["AWS_ENDPOINT_URL_S3"])
	case env["AWS_ACCESS_KEY_ID"] != minio["MINIO_ROOT_USER"] || env["AWS_SECRET_ACCESS_KEY"] != minio["MINIO_ROOT_PASSWORD"]:
		t.Error("the worker's AWS keys are not MinIO's root credentials")
	case !strings.Contains(init, "mc mb --ignore-existing local/"+bucket+"\n"):
		t.Errorf("minio-init does not create bucket %q:\n%s", bucket, init)
	}
}

// TestComposeSecured checks the secured override (docker-compose.secured.yml): the services
// that run kdedup set only variables the binary accepts, authenticate with SCRAM-SHA-512 on the
// broker's SASL listener, and take the password from a file, never a value.
func TestComposeSecured(t *testing.T) {
	var c composeFile
	if err := yaml.Unmarshal(readFile(t, deployPath("docker-compose.secured.yml")), &c); err != nil {
		t.Fatalf("docker-compose.secured.yml: %v", err)
	}
	for _, name := range []string{"kdedup", "loadgen"} {
		svc, ok := c.Services[name]
		if !ok {
			t.Fatalf("service %s missing", name)
		}
		names, err := svc.envNames()
		if err != nil {
			t.Fatalf("service %s: %v", name, err)
		}
		checkEnvNames(t, "docker-compose.secured.yml service "+name, names)
		env, _ := svc.Environment.(map[string]any)
		if env["KAFKA_SASL_MECHANISM"] != "SCRAM-SHA-512" || env["KAFKA_BROKERS"] != "kafka:9094" ||
			env["KAFKA_SASL_PASSWORD_FILE"] != "/run/secrets/kafka-password" || env["KAFKA_SASL_PASSWORD"] != nil {
			t.Errorf("service %s: environment %v, want SCRAM-SHA-512 on kafka:9094 with the password from the secret file", name, env)
		}
	}
}
