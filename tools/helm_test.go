package tools

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/lint"
	"helm.sh/helm/v3/pkg/lint/support"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"sigs.k8s.io/yaml"
)

var chartDir = deployPath("helm", "kdedup")

// kubeVersion is the cluster version the chart is rendered and linted for
// (the chart's kubeVersion constraint is >=1.25).
const kubeVersion = "v1.31.0"

// rendered holds the strictly decoded objects of one chart rendering.
type rendered struct {
	notes          string
	kinds          []string
	configMap      *corev1.ConfigMap
	services       []*corev1.Service
	serviceAccount *corev1.ServiceAccount
	statefulSet    *appsv1.StatefulSet
	pdb            *policyv1.PodDisruptionBudget
	networkPolicy  *networkingv1.NetworkPolicy
	serviceMonitor *monitoringv1.ServiceMonitor
	podMonitor     *monitoringv1.PodMonitor
	prometheusRule *monitoringv1.PrometheusRule
}

// renderChart renders the chart with the given value overrides (parsed from
// YAML) and strictly decodes every object: unknown fields, duplicate keys and
// unknown kinds are errors.
func renderChart(valuesYAML string) (*rendered, error) {
	ch, err := loader.Load(chartDir)
	if err != nil {
		return nil, fmt.Errorf("load chart: %w", err)
	}
	overrides := map[string]any{}
	if err := yaml.Unmarshal([]byte(valuesYAML), &overrides); err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		return nil, err
	}
	caps := *chartutil.DefaultCapabilities
	caps.KubeVersion = *kv
	vals, err := chartutil.ToRenderValues(ch, overrides,
		chartutil.ReleaseOptions{Name: "test", Namespace: "dedup", IsInstall: true, Revision: 1}, &caps)
	if err != nil {
		return nil, fmt.Errorf("values: %w", err)
	}
	files, err := engine.Engine{Strict: true}.Render(ch, vals)
	if err != nil {
		return nil, fmt.Errorf("render: %w", err)
	}
	r := &rendered{}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		if strings.HasSuffix(name, "/NOTES.txt") {
			r.notes = files[name]
		}
		if !strings.HasSuffix(name, ".yaml") {
			continue
		}
		manifests := releaseutil.SplitManifests(files[name])
		for _, key := range slices.Sorted(maps.Keys(manifests)) {
			if err := r.add(manifests[key]); err != nil {
				return nil, fmt.Errorf("%s: %w", name, err)
			}
		}
	}
	return r, nil
}

func (r *rendered) add(doc string) error {
	var head struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
	}
	if err := yaml.Unmarshal([]byte(doc), &head); err != nil {
		return err
	}
	if head.Kind == "" {
		return nil // a template that rendered to comments only
	}
	gvk := head.APIVersion + "/" + head.Kind
	r.kinds = append(r.kinds, head.Kind)
	var target any
	switch gvk {
	case "v1/ConfigMap":
		r.configMap = &corev1.ConfigMap{}
		target = r.configMap
	case "v1/Service":
		s := &corev1.Service{}
		r.services = append(r.services, s)
		target = s
	case "v1/ServiceAccount":
		r.serviceAccount = &corev1.ServiceAccount{}
		target = r.serviceAccount
	case "apps/v1/StatefulSet":
		r.statefulSet = &appsv1.StatefulSet{}
		target = r.statefulSet
	case "networking.k8s.io/v1/NetworkPolicy":
		r.networkPolicy = &networkingv1.NetworkPolicy{}
		target = r.networkPolicy
	case "policy/v1/PodDisruptionBudget":
		r.pdb = &policyv1.PodDisruptionBudget{}
		target = r.pdb
	case "monitoring.coreos.com/v1/ServiceMonitor":
		r.serviceMonitor = &monitoringv1.ServiceMonitor{}
		target = r.serviceMonitor
	case "monitoring.coreos.com/v1/PodMonitor":
		r.podMonitor = &monitoringv1.PodMonitor{}
		target = r.podMonitor
	case "monitoring.coreos.com/v1/PrometheusRule":
		r.prometheusRule = &monitoringv1.PrometheusRule{}
		target = r.prometheusRule
	default:
		return fmt.Errorf("unexpected object %s", gvk)
	}
	if err := yaml.UnmarshalStrict([]byte(doc), target); err != nil {
		return fmt.Errorf("%s does not decode strictly: %w", gvk, err)
	}
	return nil
}

// envNames returns every environment variable the worker container gets:
// explicit env entries and the keys of ConfigMaps it loads with envFrom.
func (r *rendered) envNames(t *testing.T) []string {
	t.Helper()
	c := r.container(t)
	var names []string
	for _, ef := range c.EnvFrom {
		if ef.ConfigMapRef == nil || r.configMap == nil || ef.ConfigMapRef.Name != r.configMap.Name {
			t.Errorf("envFrom %+v does not refer to the chart's ConfigMap", ef)
			continue
		}
		names = append(names, slices.Sorted(maps.Keys(r.configMap.Data))...)
	}
	for _, e := range c.Env {
		names = append(names, e.Name)
	}
	return names
}

func (r *rendered) container(t *testing.T) corev1.Container {
	t.Helper()
	if r.statefulSet == nil {
		t.Fatal("no StatefulSet rendered")
	}
	cs := r.statefulSet.Spec.Template.Spec.Containers
	if len(cs) != 1 {
		t.Fatalf("%d containers, want 1", len(cs))
	}
	return cs[0]
}

// defaultHeadroom is sizing.growthHeadroom's default in values.yaml.
const defaultHeadroom = 2

// expectedMaxMemory is one filter's share of DEDUP_MEMORY_LIMIT by the sizing formula of values.yaml, computed
// independently of the chart's template helper: ceil(N x capacity x bitsPerKey / 8 x headroom).
func expectedMaxMemory(n, capacity int, bitsPerKey, headroom float64) int64 {
	return int64(math.Ceil(float64(n) * float64(capacity) * bitsPerKey / 8 * headroom))
}

// expectedMemory is the memory per replica by the sizing formula of values.yaml, with the
// default growth headroom: ceil((DEDUP_MEMORY_LIMIT + partitions x inputBytes) / 2^20) +
// overheadMiB.
func expectedMemory(filters, n, capacity int, bitsPerKey float64, overheadMiB int) string {
	return expectedMemoryWith(filters, n, capacity, bitsPerKey, defaultHeadroom, overheadMiB)
}

// defaultInputBytes is what one partition's reader may hold with the chart's defaults: 5 fetch
// responses of 4 MiB (sizing.fetchResponses, kafka.fetchMaxBytes) and one batch at the default
// decode cap, max(4 x 4 MiB, 16 MiB).
const defaultInputBytes = 5*4<<20 + 16<<20

// expectedMemoryWith is expectedMemory with another growth headroom. The partitions read are
// sizing.partitionsPerReplica: filters under scope partition, its default 4 under scope global
// (one filter).
func expectedMemoryWith(filters, n, capacity int, bitsPerKey, headroom float64, overheadMiB int) string {
	partitions := filters
	if filters == 1 {
		partitions = 4
	}
	bytes := float64(filters)*float64(expectedMaxMemory(n, capacity, bitsPerKey, headroom)) + float64(partitions*defaultInputBytes)
	return fmt.Sprintf("%dMi", int(math.Ceil(bytes/(1<<20)))+overheadMiB)
}

func TestChartRendersStrictly(t *testing.T) {
	tests := []struct {
		name        string
		values      string
		wantKinds   []string
		memory      string
		replicas    int32
		memoryLimit int64 // DEDUP_MEMORY_LIMIT: the filters x their memory by the formula; 0: not checked
	}{
		{
			name:   "defaults",
			values: "",
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:      expectedMemory(4, 8, 1000000, 40, 64),
			replicas:    2,
			memoryLimit: 4 * expectedMaxMemory(8, 1000000, 40, defaultHeadroom),
		},
		{
			name:        "no room to grow",
			values:      `sizing: {growthHeadroom: 1}`,
			wantKinds:   []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service", "ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:      expectedMemoryWith(4, 8, 1000000, 40, 1, 64),
			replicas:    2,
			memoryLimit: 4 * 40_000_000,
		},
		{
			name: "global scope, PodMonitor, no rules or PDB",
			values: `
replicaCount: 1
dedup: {scope: global}
serviceMonitor: {enabled: false}
podMonitor: {enabled: true}
prometheusRule: {enabled: false}
podDisruptionBudget: {enabled: false}
serviceAccount: {create: false}
`,
			wantKinds:   []string{"ConfigMap", "PodMonitor", "Service", "Service", "StatefulSet"},
			memory:      expectedMemory(1, 8, 1000000, 40, 64),
			replicas:    1,
			memoryLimit: expectedMaxMemory(8, 1000000, 40, defaultHeadroom),
		},
		{
			name: "p=1e-3 sizing with 12 partitions per replica and extra env",
			values: `
replicaCount: 3
dedup: {falsePositiveRate: "1e-3", window: {count: 8, interval: 10m, capacity: 5000000}}
sizing: {partitionsPerReplica: 12, bitsPerKey: 21, overheadMiB: 96}
extraEnv: [{name: LOG_LEVEL, value: debug}]
`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:      expectedMemory(12, 8, 5000000, 21, 96),
			replicas:    3,
			memoryLimit: 12 * expectedMaxMemory(8, 5000000, 21, defaultHeadroom),
		},
		{
			name:   "directory per pod",
			values: `checkpoint: {store: dir}`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   expectedMemory(4, 8, 1000000, 40, 64),
			replicas: 2,
		},
		{
			name:   "shared directory",
			values: `{checkpoint: {store: dir, dir: /ckpt}, persistence: {existingClaim: kdedup-rwx}}`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   expectedMemory(4, 8, 1000000, 40, 64),
			replicas: 2,
		},
		{
			name:   "rebuild only",
			values: `checkpoint: {store: none, rebuildMaxRecords: 2000000}`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   expectedMemory(4, 8, 1000000, 40, 64),
			replicas: 2,
		},
		{
			name: "MinIO with static keys",
			values: `
checkpoint: {s3: {bucket: ckpt, prefix: team/kdedup/, endpoint: "http://minio.minio:9000", region: eu-west-1, credentialsSecret: minio-keys}}
extraEnv: [{name: LOG_LEVEL, value: debug}]
`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   expectedMemory(4, 8, 1000000, 40, 64),
			replicas: 2,
		},
		{
			name:   "S3 with IRSA",
			values: `{checkpoint: {s3: {bucket: my-bucket}}, serviceAccount: {roleArn: "arn:aws:iam::123456789012:role/kdedup", annotations: {team: data}}}`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   expectedMemory(4, 8, 1000000, 40, 64),
			replicas: 2,
		},
		{
			name:   "explicit memory",
			values: `resources: {requests: {cpu: "1", memory: 2Gi}, limits: {memory: 2Gi}}`,
			wantKinds: []string{"ConfigMap", "PodDisruptionBudget", "PrometheusRule", "Service", "Service",
				"ServiceAccount", "ServiceMonitor", "StatefulSet"},
			memory:   "2Gi",
			replicas: 2,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := renderChart(tt.values)
			if err != nil {
				t.Fatal(err)
			}
			slices.Sort(r.kinds)
			if !slices.Equal(r.kinds, tt.wantKinds) {
				t.Errorf("kinds = %v, want %v", r.kinds, tt.wantKinds)
			}
			checkStatefulSet(t, r, tt.replicas, tt.memory)
			if got, want := r.configMap.Data["DEDUP_MEMORY_LIMIT"], fmt.Sprint(tt.memoryLimit); tt.memoryLimit != 0 && got != want {
				t.Errorf("DEDUP_MEMORY_LIMIT = %q, want %s", got, want)
			}
			if _, ok := r.configMap.Data["DEDUP_MAX_MEMORY"]; ok {
				t.Error("the chart sets DEDUP_MAX_MEMORY, which kdedup refuses")
			}
			if note := fmt.Sprintf("Memory budget of the filters (DEDUP_MEMORY_LIMIT): %d bytes", tt.memoryLimit); tt.memoryLimit != 0 && !strings.Contains(r.notes, note) {
				t.Errorf("notes do not say %q:\n%s", note, r.notes)
			}
			checkEnvNames(t, "chart ("+tt.name+")", r.envNames(t))
			checkSelectors(t, r)
			if r.prometheusRule != nil && len(r.prometheusRule.Spec.Groups) < 2 {
				t.Errorf("PrometheusRule has %d groups, want the recording and alerting groups", len(r.prometheusRule.Spec.Groups))
			}
		})
	}
}

func checkStatefulSet(t *testing.T, r *rendered, replicas int32, memory string) {
	t.Helper()
	sts := r.statefulSet
	c := r.container(t)
	if got := deref(sts.Spec.Replicas); got != replicas {
		t.Errorf("replicas = %d, want %d", got, replicas)
	}
	want := resource.MustParse(memory)
	for what, got := range map[string]resource.Quantity{
		"request": c.Resources.Requests[corev1.ResourceMemory],
		"limit":   c.Resources.Limits[corev1.ResourceMemory],
	} {
		if got.Cmp(want) != 0 {
			t.Errorf("memory %s = %s, want %s", what, got.String(), want.String())
		}
	}

	// The final commit and checkpoint must fit in the grace period.
	shutdown, err := time.ParseDuration(r.configMap.Data["SHUTDOWN_TIMEOUT"])
	if err != nil {
		t.Fatalf("SHUTDOWN_TIMEOUT: %v", err)
	}
	grace := time.Duration(deref(sts.Spec.Template.Spec.TerminationGracePeriodSeconds)) * time.Second
	if grace <= shutdown {
		t.Errorf("terminationGracePeriodSeconds %v <= SHUTDOWN_TIMEOUT %v", grace, shutdown)
	}

	checkCheckpointStore(t, r, c)

	// The probes and the HTTP server agree on the port.
	addr := r.configMap.Data["HTTP_ADDR"]
	port, err := strconv.Atoi(strings.TrimPrefix(addr, ":"))
	if err != nil || len(c.Ports) != 1 || c.Ports[0].ContainerPort != int32(port) || c.Ports[0].Name != "http" {
		t.Errorf("HTTP_ADDR %q does not match container ports %+v", addr, c.Ports)
	}
	for name, p := range map[string]*corev1.Probe{"startup": c.StartupProbe, "liveness": c.LivenessProbe, "readiness": c.ReadinessProbe} {
		if p == nil || p.HTTPGet == nil || p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe is not an HTTP GET on the http port", name)
		}
	}
	sc := sts.Spec.Template.Spec.SecurityContext
	if sc == nil || !deref(sc.RunAsNonRoot) {
		t.Error("pod does not run as non-root")
	}
	if sts.Spec.ServiceName == "" {
		t.Error("StatefulSet has no governing service")
	}
}

// checkCheckpointStore checks that the pod gets the store the ConfigMap names: a volume at
// CHECKPOINT_DIR (a claim template per pod, or a shared claim), or no volume for CHECKPOINT_URL
// (s3, with the keys from a Secret if any) and for no store at all.
func checkCheckpointStore(t *testing.T, r *rendered, c corev1.Container) {
	t.Helper()
	sts, data := r.statefulSet, r.configMap.Data
	dir, url := data["CHECKPOINT_DIR"], data["CHECKPOINT_URL"]
	if dir != "" && url != "" {
		t.Errorf("both CHECKPOINT_DIR %q and CHECKPOINT_URL %q set", dir, url)
	}
	if _, ok := data["CHECKPOINT_REBUILD_MAX_RECORDS"]; !ok {
		t.Error("CHECKPOINT_REBUILD_MAX_RECORDS not set")
	}
	if dir == "" {
		if len(sts.Spec.VolumeClaimTemplates) != 0 || len(sts.Spec.Template.Spec.Volumes) != 0 || len(c.VolumeMounts) != 0 {
			t.Errorf("a volume without CHECKPOINT_DIR: claims %d, volumes %d, mounts %d",
				len(sts.Spec.VolumeClaimTemplates), len(sts.Spec.Template.Spec.Volumes), len(c.VolumeMounts))
		}
		if url != "" && !strings.HasPrefix(url, "s3://") {
			t.Errorf("CHECKPOINT_URL %q is not an s3:// URL", url)
		}
		return
	}
	var claims []string
	for _, ct := range sts.Spec.VolumeClaimTemplates {
		claims = append(claims, ct.Name)
	}
	for _, v := range sts.Spec.Template.Spec.Volumes {
		if v.PersistentVolumeClaim != nil {
			claims = append(claims, v.Name)
		}
	}
	if len(claims) != 1 || len(c.VolumeMounts) != 1 || c.VolumeMounts[0].Name != claims[0] || c.VolumeMounts[0].MountPath != dir {
		t.Errorf("volumes %v with mounts %+v: want one claim mounted at CHECKPOINT_DIR %q", claims, c.VolumeMounts, dir)
	}
}

func checkSelectors(t *testing.T, r *rendered) {
	t.Helper()
	podLabels := r.statefulSet.Spec.Template.Labels
	matches := func(sel map[string]string) bool {
		if len(sel) == 0 {
			return false
		}
		for k, v := range sel {
			if podLabels[k] != v {
				return false
			}
		}
		return true
	}
	if !matches(r.statefulSet.Spec.Selector.MatchLabels) {
		t.Error("StatefulSet selector does not match its pod labels")
	}
	headless := false
	for _, s := range r.services {
		if !matches(s.Spec.Selector) {
			t.Errorf("Service %s does not select the pods", s.Name)
		}
		if s.Name == r.statefulSet.Spec.ServiceName && s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = true
		}
	}
	if !headless {
		t.Errorf("governing service %s is missing or not headless", r.statefulSet.Spec.ServiceName)
	}
	if r.pdb != nil && !matches(r.pdb.Spec.Selector.MatchLabels) {
		t.Error("PodDisruptionBudget does not select the pods")
	}
	if sm := r.serviceMonitor; sm != nil {
		var svc *corev1.Service
		for _, s := range r.services {
			if s.Spec.ClusterIP != corev1.ClusterIPNone {
				svc = s
			}
		}
		if svc == nil {
			t.Fatal("no non-headless Service for the ServiceMonitor")
		}
		for k, v := range sm.Spec.Selector.MatchLabels {
			if svc.Labels[k] != v {
				t.Errorf("ServiceMonitor selector %s=%s does not match Service %s", k, v, svc.Name)
			}
		}
		for _, other := range r.services {
			if other != svc && labelsMatch(sm.Spec.Selector.MatchLabels, other.Labels) {
				t.Errorf("ServiceMonitor also selects Service %s: every pod would be scraped under two jobs", other.Name)
			}
		}
		for _, ep := range sm.Spec.Endpoints {
			found := false
			for _, p := range svc.Spec.Ports {
				found = found || p.Name == ep.Port
			}
			if !found || ep.Path != "/metrics" {
				t.Errorf("ServiceMonitor endpoint %s%s does not match a Service port serving /metrics", ep.Port, ep.Path)
			}
		}
	}
	if pm := r.podMonitor; pm != nil && !matches(pm.Spec.Selector.MatchLabels) {
		t.Error("PodMonitor does not select the pods")
	}
}

func TestChartRejectsBadValues(t *testing.T) {
	tests := []struct {
		name, values, wantErr string
	}{
		{"global scope with replicas", "replicaCount: 2\ndedup: {scope: global}", "replicaCount must be 1"},
		{"two monitors", "podMonitor: {enabled: true}", "only one of serviceMonitor and podMonitor"},
		{"unknown mode (schema)", "dedup: {mode: bogus}", "dedup"},
		{"unknown value key (schema)", "dedup: {windoww: {}}", "windoww"},
		{"s3 without a bucket", "checkpoint: {s3: {bucket: \"\"}}", "needs checkpoint.s3.bucket"},
		{"unknown store (schema)", "checkpoint: {store: nfs}", "store"},
		{"endpoint with credentials (schema)", "checkpoint: {s3: {endpoint: \"http://u:p@minio:9000\"}}", "endpoint"},
		{"role that is no ARN (schema)", "serviceAccount: {roleArn: kdedup}", "roleArn"},
		{"unknown SASL mechanism (schema)", "kafka: {sasl: {mechanism: GSSAPI}}", "mechanism"},
		{"SCRAM without credentials", "kafka: {sasl: {mechanism: SCRAM-SHA-512}}", "needs kafka.sasl.credentialsSecret"},
		{"CA without TLS", "kafka: {tls: {caSecret: ca}}", "need kafka.tls.enabled=true"},
		{"MSK IAM without TLS", "kafka: {sasl: {mechanism: AWS_MSK_IAM}}", "AWS_MSK_IAM needs kafka.tls.enabled=true"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := renderChart(tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("err = %v, want one containing %q", err, tt.wantErr)
			}
		})
	}
}

// TestChartStoreValues checks what each checkpoint store puts into the worker's environment, the
// ServiceAccount and the install notes.
func TestChartStoreValues(t *testing.T) {
	for _, tc := range []struct {
		name, values string
		env          map[string]string // "" means: must not be set
		secretEnv    bool
		annotation   string
		notes        string
	}{
		{"defaults: s3", "", map[string]string{"CHECKPOINT_URL": "s3://kdedup-checkpoints/kdedup", "CHECKPOINT_DIR": "",
			"AWS_ENDPOINT_URL_S3": "", "CHECKPOINT_REBUILD_MAX_RECORDS": "10000000"}, false, "", "Checkpoints: s3://kdedup-checkpoints/kdedup (credentials from the AWS SDK's default chain).\nRebuild from the output topic: at most 10000000 records per partition."},
		{"MinIO", `checkpoint: {s3: {bucket: ckpt, prefix: "", endpoint: "http://minio:9000", region: eu-west-1, credentialsSecret: keys}}`,
			map[string]string{"CHECKPOINT_URL": "s3://ckpt/", "AWS_ENDPOINT_URL_S3": "http://minio:9000", "AWS_REGION": "eu-west-1"},
			true, "", "keys from Secret keys"},
		{"IRSA", `serviceAccount: {roleArn: "arn:aws:iam::123456789012:role/kdedup"}`, map[string]string{"AWS_ACCESS_KEY_ID": ""},
			false, "arn:aws:iam::123456789012:role/kdedup", "IRSA role"},
		{"shared directory", `{checkpoint: {store: dir}, persistence: {existingClaim: rwx}}`,
			map[string]string{"CHECKPOINT_DIR": "/var/lib/kdedup", "CHECKPOINT_URL": ""}, false, "", "shared claim rwx"},
		{"rebuild only", `checkpoint: {store: none}`, map[string]string{"CHECKPOINT_DIR": "", "CHECKPOINT_URL": "", "CHECKPOINT_INTERVAL": ""},
			false, "", "none (a partition is rebuilt from the output topic when assigned)"},
		{"nothing kept", `checkpoint: {store: none, rebuildMaxRecords: 0}`, map[string]string{"CHECKPOINT_REBUILD_MAX_RECORDS": "0"},
			false, "", "Rebuild from the output topic: disabled: a partition without a usable checkpoint starts empty"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := renderChart(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.env {
				if got := r.configMap.Data[k]; got != want {
					t.Errorf("%s = %q, want %q", k, got, want)
				}
			}
			secret := 0
			for _, e := range r.container(t).Env {
				if e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil && e.ValueFrom.SecretKeyRef.Key == e.Name {
					secret++
				}
			}
			if (secret == 2) != tc.secretEnv {
				t.Errorf("%d AWS keys from a Secret, want them: %v", secret, tc.secretEnv)
			}
			if got := r.serviceAccount.Annotations["eks.amazonaws.com/role-arn"]; got != tc.annotation {
				t.Errorf("role annotation %q, want %q", got, tc.annotation)
			}
			if !strings.Contains(r.notes, tc.notes) {
				t.Errorf("notes do not say %q:\n%s", tc.notes, r.notes)
			}
		})
	}
}

func TestStrictDecodeRejectsUnknownFields(t *testing.T) {
	r := &rendered{}
	err := r.add("apiVersion: apps/v1\nkind: StatefulSet\nmetadata: {name: x}\nspec: {replica: 2}\n")
	if err == nil || !strings.Contains(err.Error(), "replica") {
		t.Errorf("err = %v, want an unknown-field error for spec.replica", err)
	}
	if err := r.add("apiVersion: v1\nkind: Secret\nmetadata: {name: x}\n"); err == nil {
		t.Error("unexpected kind accepted")
	}
}

func TestChartLintsStrictly(t *testing.T) {
	kv, err := chartutil.ParseKubeVersion(kubeVersion)
	if err != nil {
		t.Fatal(err)
	}
	linter := lint.AllWithKubeVersion(chartDir, nil, "dedup", kv)
	for _, m := range linter.Messages {
		// helm lint --strict fails on warnings and errors; info (such as "icon is
		// recommended") is fine.
		if m.Severity >= support.WarningSev {
			t.Errorf("helm lint: %s", m)
		}
	}
}

// TestChartKafkaSecurity checks that the Kafka TLS and SASL values reach the worker as files of
// existing Secrets (the *_FILE variables and read-only mounts), never as values in the ConfigMap.
func TestChartKafkaSecurity(t *testing.T) {
	r, err := renderChart(`kafka: {tls: {enabled: true, serverName: kafka.internal, caSecret: kafka-ca, clientCertSecret: kdedup-tls},
  sasl: {mechanism: SCRAM-SHA-512, credentialsSecret: kdedup-kafka}}`)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"KAFKA_TLS_ENABLED": "true", "KAFKA_TLS_SERVER_NAME": "kafka.internal", "KAFKA_TLS_CA_FILE": "/etc/kdedup/kafka/ca/ca.crt",
		"KAFKA_TLS_CERT_FILE": "/etc/kdedup/kafka/client/tls.crt", "KAFKA_TLS_KEY_FILE": "/etc/kdedup/kafka/client/tls.key",
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME_FILE": "/etc/kdedup/kafka/sasl/username",
		"KAFKA_SASL_PASSWORD_FILE": "/etc/kdedup/kafka/sasl/password", "KAFKA_SASL_PASSWORD": "",
	} {
		if got := r.configMap.Data[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	secrets := map[string]string{}
	for _, v := range r.statefulSet.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	mounts := map[string]string{}
	for _, m := range r.container(t).VolumeMounts {
		if !m.ReadOnly {
			t.Errorf("mount %s is writable", m.Name)
		}
		mounts[m.Name] = m.MountPath
	}
	for vol, want := range map[string][2]string{
		"kafka-ca": {"kafka-ca", "/etc/kdedup/kafka/ca"}, "kafka-client": {"kdedup-tls", "/etc/kdedup/kafka/client"},
		"kafka-sasl": {"kdedup-kafka", "/etc/kdedup/kafka/sasl"},
	} {
		if secrets[vol] != want[0] || mounts[vol] != want[1] {
			t.Errorf("volume %s: Secret %q at %q, want %q at %q", vol, secrets[vol], mounts[vol], want[0], want[1])
		}
	}
	r, err = renderChart(`{kafka: {tls: {enabled: true}, sasl: {mechanism: AWS_MSK_IAM, awsRegion: eu-west-1}}, checkpoint: {store: none}}`)
	if err != nil {
		t.Fatal(err)
	}
	if r.configMap.Data["AWS_REGION"] != "eu-west-1" || r.configMap.Data["KAFKA_SASL_MECHANISM"] != "AWS_MSK_IAM" {
		t.Errorf("MSK IAM: %v", r.configMap.Data)
	}
}

// TestChartSchemaRegistry checks that schemaRegistry becomes the SCHEMA_REGISTRY_* variables,
// with credentials and certificates as files from mounted Secrets, and nothing without a URL.
func TestChartSchemaRegistry(t *testing.T) {
	r, err := renderChart(`{dedup: {key: "avro:meta.id"}, schemaRegistry: {url: "https://registry:8081", credentialsSecret: sr-auth,
  caSecret: sr-ca, clientCertSecret: sr-tls, serverName: registry.internal}}`)
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"DEDUP_KEY": "avro:meta.id", "SCHEMA_REGISTRY_URL": "https://registry:8081", "SCHEMA_REGISTRY_TIMEOUT": "10s",
		"SCHEMA_REGISTRY_USERNAME_FILE": "/etc/kdedup/registry/auth/username", "SCHEMA_REGISTRY_PASSWORD_FILE": "/etc/kdedup/registry/auth/password",
		"SCHEMA_REGISTRY_TLS_CA_FILE": "/etc/kdedup/registry/ca/ca.crt", "SCHEMA_REGISTRY_TLS_CERT_FILE": "/etc/kdedup/registry/client/tls.crt",
		"SCHEMA_REGISTRY_TLS_KEY_FILE": "/etc/kdedup/registry/client/tls.key", "SCHEMA_REGISTRY_TLS_SERVER_NAME": "registry.internal",
		"SCHEMA_REGISTRY_PASSWORD": "",
	} {
		if got := r.configMap.Data[k]; got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	secrets := map[string]string{}
	for _, v := range r.statefulSet.Spec.Template.Spec.Volumes {
		if v.Secret != nil {
			secrets[v.Name] = v.Secret.SecretName
		}
	}
	mounts := map[string]string{}
	for _, m := range r.container(t).VolumeMounts {
		mounts[m.Name] = m.MountPath
	}
	for vol, want := range map[string][2]string{
		"registry-auth": {"sr-auth", "/etc/kdedup/registry/auth"}, "registry-ca": {"sr-ca", "/etc/kdedup/registry/ca"},
		"registry-client": {"sr-tls", "/etc/kdedup/registry/client"},
	} {
		if secrets[vol] != want[0] || mounts[vol] != want[1] {
			t.Errorf("volume %s: Secret %q at %q, want %q at %q", vol, secrets[vol], mounts[vol], want[0], want[1])
		}
	}
	r, err = renderChart(`{}`)
	if err != nil {
		t.Fatal(err)
	}
	for k := range r.configMap.Data {
		if strings.HasPrefix(k, "SCHEMA_REGISTRY_") {
			t.Errorf("%s set without schemaRegistry.url", k)
		}
	}
}

// TestChartAuditTopic proves that kafka.duplicatesTopic and kafka.duplicatesContent reach the
// worker as KAFKA_DUPLICATES_TOPIC and KAFKA_DUPLICATES_CONTENT, and that neither is set without
// an audit topic.
func TestChartAuditTopic(t *testing.T) {
	for _, tc := range []struct {
		name, values   string
		topic, content string
	}{
		{"off", "", "", ""},
		{"full", `kafka: {duplicatesTopic: events-audit}`, "events-audit", "full"},
		{"headers", `kafka: {duplicatesTopic: events-audit, duplicatesContent: headers}`, "events-audit", "headers"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, err := renderChart(tc.values)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.configMap.Data["KAFKA_DUPLICATES_TOPIC"]; got != tc.topic {
				t.Errorf("KAFKA_DUPLICATES_TOPIC = %q, want %q", got, tc.topic)
			}
			if got := r.configMap.Data["KAFKA_DUPLICATES_CONTENT"]; got != tc.content {
				t.Errorf("KAFKA_DUPLICATES_CONTENT = %q, want %q", got, tc.content)
			}
		})
	}
	if _, err := renderChart(`kafka: {duplicatesTopic: a, duplicatesContent: keys}`); err == nil {
		t.Error("duplicatesContent keys was accepted")
	}
}

// TestChartSLOObjectives proves that prometheusRule.slo sets the objectives of the two SLOs in
// the PrometheusRule, keeping the shape of the rule in alerts.yml, and that the defaults are
// alerts.yml's own.
func TestChartSLOObjectives(t *testing.T) {
	tests := []struct {
		name, values string
		lost, leaked string
	}{
		{"defaults", "", "0.9999", "0.999"},
		{"set", "prometheusRule: {slo: {eventsDelivered: 0.99999, duplicatesStopped: 0.9995}}", "0.99999", "0.9995"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := renderChart(tt.values)
			if err != nil {
				t.Fatal(err)
			}
			got := map[string]string{}
			for _, g := range r.prometheusRule.Spec.Groups {
				for _, rule := range g.Rules {
					if strings.HasPrefix(rule.Record, "kdedup:slo_") && strings.HasSuffix(rule.Record, ":objective") {
						got[rule.Record] = rule.Expr.String()
					}
				}
			}
			want := map[string]string{
				"kdedup:slo_events_lost:objective":       tt.lost + " * group by (job) (kdedup_build_info)",
				"kdedup:slo_duplicates_leaked:objective": tt.leaked + " * group by (job) (kdedup_build_info)",
			}
			if !maps.Equal(got, want) {
				t.Errorf("objectives %v, want %v", got, want)
			}
		})
	}
	if _, err := renderChart("prometheusRule: {slo: {eventsDelivered: 1}}"); err == nil {
		t.Error("an objective of 1 (no error budget) was accepted")
	}
}

// labelsMatch reports whether labels hold every pair of sel.
func labelsMatch(sel, labels map[string]string) bool {
	for k, v := range sel {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// TestChartGoMemLimit proves that GOMEMLIMIT is goMemLimitPercent of the container's memory limit,
// computed or given in any unit, and absent at 0.
func TestChartGoMemLimit(t *testing.T) {
	tests := []struct{ name, values, want string }{
		{"sizing formula", "", fmt.Sprint(int64(538968064) * 90 / 100)}, // 514Mi: the default sizing formula
		{"explicit limit", `resources: {requests: {memory: 2Gi}, limits: {memory: 2Gi}}`, fmt.Sprint(int64(2<<30) * 90 / 100)},
		{"decimal unit, other percent", `{goMemLimitPercent: 80, resources: {requests: {memory: 1G}, limits: {memory: 1G}}}`, "800000000"},
		{"off", `goMemLimitPercent: 0`, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r, err := renderChart(tt.values)
			if err != nil {
				t.Fatal(err)
			}
			got := ""
			for _, e := range r.container(t).Env {
				if e.Name == "GOMEMLIMIT" {
					got = e.Value
				}
			}
			if got != tt.want {
				t.Errorf("GOMEMLIMIT = %q, want %q", got, tt.want)
			}
		})
	}
	if _, err := renderChart(`resources: {requests: {memory: 2Xi}, limits: {memory: 2Xi}}`); err == nil {
		t.Error("a memory limit with an unknown unit was accepted")
	}
}
