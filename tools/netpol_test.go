package tools

import (
	"testing"
)

// TestChartNetworkPolicyAndDigest proves the optional NetworkPolicy (off by default: no policy
// rendered) limits ingress to the HTTP port from the given peers and egress to the given rules
// plus DNS, that image.digest pins the image by digest, and that the hash seed and the checkpoint
// signing key come from Secrets.
func TestChartNetworkPolicyAndDigest(t *testing.T) {
	off, err := renderChart(`checkpoint: {s3: {bucket: my-bucket}}`)
	if err != nil {
		t.Fatal(err)
	}
	if off.networkPolicy != nil {
		t.Error("a NetworkPolicy is rendered by default")
	}
	const digest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"
	r, err := renderChart(`
checkpoint: {s3: {bucket: my-bucket}, signingKeySecret: {name: kdedup-signing, key: hmac}}
image: {digest: "` + digest + `"}
dedup: {hashSeedSecret: {name: kdedup-seed, key: seed}}
networkPolicy:
  enabled: true
  metricsFrom: [{namespaceSelector: {matchLabels: {name: monitoring}}}]
  egress: [{to: [{ipBlock: {cidr: 10.0.0.0/8}}], ports: [{port: 9093, protocol: TCP}]}]
`)
	if err != nil {
		t.Fatal(err)
	}
	np := r.networkPolicy
	if np == nil {
		t.Fatal("no NetworkPolicy rendered")
	}
	in := np.Spec.Ingress
	if len(in) != 1 || len(in[0].Ports) != 1 || in[0].Ports[0].Port.String() != "http" || len(in[0].From) != 1 {
		t.Errorf("ingress %+v, want the http port from one peer", in)
	}
	if eg := np.Spec.Egress; len(eg) != 2 || len(eg[0].Ports) != 2 || eg[0].Ports[0].Port.IntValue() != 53 {
		t.Errorf("egress %+v, want DNS and the given rule", eg)
	}
	c := r.container(t)
	if c.Image != "ghcr.io/kdedup/kdedup@"+digest {
		t.Errorf("image %q, want it pinned by digest", c.Image)
	}
	seeded, signed := false, false
	for _, e := range c.Env {
		seeded = seeded || e.Name == "DEDUP_HASH_SEED" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "kdedup-seed" && e.ValueFrom.SecretKeyRef.Key == "seed"
		signed = signed || e.Name == "CHECKPOINT_SIGNING_KEY" && e.ValueFrom != nil && e.ValueFrom.SecretKeyRef != nil &&
			e.ValueFrom.SecretKeyRef.Name == "kdedup-signing" && e.ValueFrom.SecretKeyRef.Key == "hmac"
	}
	if !seeded {
		t.Errorf("env %+v: DEDUP_HASH_SEED does not come from the Secret", c.Env)
	}
	if !signed {
		t.Errorf("env %+v: CHECKPOINT_SIGNING_KEY does not come from the Secret", c.Env)
	}
	for _, e := range off.container(t).Env {
		if e.Name == "CHECKPOINT_SIGNING_KEY" {
			t.Error("CHECKPOINT_SIGNING_KEY is set without checkpoint.signingKeySecret")
		}
	}
}
