package app

import (
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/testpki"
)

// secureOn starts the secured cluster of o on a broker of kind k: startSecure's kfake, or a real
// Kafka whose SASL_SSL listener serves o (SCRAM users made when its storage is formatted, PLAIN
// users in the listener's JAAS configuration, PEM key and trust stores from testpki). broker are
// properties added to a real broker's configuration.
func secureOn(t *testing.T, k testbroker.Kind, o secureOptions, broker map[string]string) secureSetup {
	t.Helper()
	if k == testbroker.Fake {
		return startSecure(t, o)
	}
	if o.acls != nil {
		t.Fatal("secureOn: ACLs are kfake's only here")
	}
	dir := t.TempDir()
	ca, err := testpki.NewCA("kdedup test CA")
	must(t, err)
	hosts := []string{"127.0.0.1"}
	if o.certName != "" {
		hosts = []string{o.certName}
	}
	leaf, err := ca.Issue(testpki.LeafOptions{Name: "broker", Hosts: hosts})
	must(t, err)
	keystore, err := testpki.WriteFile(dir, "broker-keystore.pem", append(pkcs8PEM(t, leaf.KeyPEM), leaf.CertPEM...))
	must(t, err)
	caFile, err := testpki.WriteFile(dir, "ca.pem", ca.PEM)
	must(t, err)
	l := "listener.name.sasl_ssl."
	cfg := map[string]string{
		"sasl.enabled.mechanisms":            "SCRAM-SHA-512,SCRAM-SHA-256,PLAIN",
		l + "ssl.keystore.type":              "PEM",
		l + "ssl.keystore.location":          keystore,
		l + "ssl.truststore.type":            "PEM",
		l + "ssl.truststore.location":        caFile,
		l + "ssl.client.auth":                "none",
		l + "plain.sasl.jaas.config":         fmt.Sprintf(`org.apache.kafka.common.security.plain.PlainLoginModule required user_%s="%s";`, o.user, o.password),
		l + "scram-sha-512.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
		l + "scram-sha-256.sasl.jaas.config": "org.apache.kafka.common.security.scram.ScramLoginModule required;",
	}
	if o.mutual {
		cfg[l+"ssl.client.auth"] = "required"
	}
	maps.Copy(cfg, broker)
	b := testbroker.Start(t, testbroker.Real, testbroker.Options{
		Topics: restartTopics.Topics,
		Real: testbroker.RealOptions{Listeners: []string{"SASL_SSL"}, Config: cfg, Format: []string{
			"--add-scram", fmt.Sprintf("SCRAM-SHA-512=[name=%s,password=%s]", o.user, o.password),
			"--add-scram", fmt.Sprintf("SCRAM-SHA-256=[name=%s,password=%s]", o.user, o.password),
		}},
	})
	e := restartEnviron(b, "", "partition")
	e["KAFKA_BROKERS"] = strings.Join(b.Real().Listener("SASL_SSL"), ",")
	e["KAFKA_TLS_ENABLED"], e["KAFKA_TLS_CA_FILE"] = "true", caFile
	e["KAFKA_SASL_MECHANISM"], e["KAFKA_SASL_USERNAME"], e["KAFKA_SASL_PASSWORD"] = strings.ToLower(o.mech), o.user, o.password
	if o.certName != "" {
		e["KAFKA_TLS_SERVER_NAME"] = o.certName
	}
	if o.mutual {
		client, err := ca.Issue(testpki.LeafOptions{Name: "kdedup", Client: true})
		must(t, err)
		e["KAFKA_TLS_CERT_FILE"], err = testpki.WriteFile(dir, "client.pem", client.CertPEM)
		must(t, err)
		e["KAFKA_TLS_KEY_FILE"], err = testpki.WriteFile(dir, "client-key.pem", client.KeyPEM)
		must(t, err)
	}
	t.Logf("real Kafka SASL_SSL listener %s; broker log %s", e["KAFKA_BROKERS"], filepath.Join(b.Real().Dir(), "node-1", "server.log"))
	return secureSetup{cl: b, environ: e, ca: ca}
}

// pkcs8PEM returns an "EC PRIVATE KEY" PEM block as the unencrypted PKCS#8 "PRIVATE KEY" block
// that Kafka's PEM key store reads.
func pkcs8PEM(t *testing.T, keyPEM []byte) []byte {
	t.Helper()
	blk, _ := pem.Decode(keyPEM)
	if blk == nil {
		t.Fatal("pkcs8PEM: no PEM block")
	}
	key, err := x509.ParseECPrivateKey(blk.Bytes)
	must(t, err)
	der, err := x509.MarshalPKCS8PrivateKey(key)
	must(t, err)
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der})
}
