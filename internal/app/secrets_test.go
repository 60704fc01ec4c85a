package app

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSecretFiles proves that every secret variable can come from NAME_FILE (a trailing newline
// removed), that setting both or naming an unreadable file is a problem naming NAME_FILE, and
// that no problem shows a value.
func TestSecretFiles(t *testing.T) {
	dir := t.TempDir()
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	want := []string{"KAFKA_SASL_USERNAME", "KAFKA_SASL_PASSWORD", "DEDUP_HASH_SEED", "CHECKPOINT_SIGNING_KEY", "AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN",
		"SCHEMA_REGISTRY_USERNAME", "SCHEMA_REGISTRY_PASSWORD"}
	if got := SecretVars(); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("SecretVars = %v, want %v", got, want)
	}
	cfg, err := Load(withEnv(map[string]string{
		"KAFKA_SASL_MECHANISM": "SCRAM-SHA-512", "KAFKA_SASL_USERNAME_FILE": write("user", "svc\n"),
		"KAFKA_SASL_PASSWORD_FILE": write("pw", "pw-Zq9 with spaces \n"), "DEDUP_HASH_SEED_FILE": write("seed", "42"),
		"CHECKPOINT_SIGNING_KEY_FILE": write("hmac", strings.Repeat("h", 32)+"\n"),
	}))
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Checkpoint.SigningKey != strings.Repeat("h", 32) {
		t.Errorf("signing key from a file: %d bytes, want the file's 32", len(cfg.Checkpoint.SigningKey))
	}
	if cfg.Kafka.SASLUsername != "svc" || cfg.Kafka.SASLPassword != "pw-Zq9 with spaces " || cfg.Dedup.HashSeed != 42 {
		t.Errorf("from files: user %q, password %q, seed %d", cfg.Kafka.SASLUsername, cfg.Kafka.SASLPassword, cfg.Dedup.HashSeed)
	}
	_, err = Load(withEnv(map[string]string{
		"KAFKA_SASL_MECHANISM": "PLAIN", "KAFKA_SASL_USERNAME": "svc",
		"KAFKA_SASL_PASSWORD": "pw-Zq9", "KAFKA_SASL_PASSWORD_FILE": write("pw2", "pw-Zq9"),
		"AWS_SECRET_ACCESS_KEY_FILE": filepath.Join(dir, "missing"), "DEDUP_HASH_SEED_FILE": write("bad", "pw-Zq9"),
	}))
	var ce *ConfigError
	if !errors.As(err, &ce) {
		t.Fatalf("Load = %v, want a *ConfigError", err)
	}
	for _, name := range []string{"KAFKA_SASL_PASSWORD_FILE: KAFKA_SASL_PASSWORD is set too", "AWS_SECRET_ACCESS_KEY_FILE:", "DEDUP_HASH_SEED:"} {
		if !strings.Contains(err.Error(), name) {
			t.Errorf("no problem says %q:\n%v", name, err)
		}
	}
	if strings.Contains(err.Error(), "Zq9") {
		t.Errorf("a problem shows a secret:\n%v", err)
	}
}

// TestMSKIAMConfig proves that KAFKA_SASL_MECHANISM=AWS_MSK_IAM (any case) signs with the AWS_*
// credentials and region, needs TLS, and refuses a user name or password.
func TestMSKIAMConfig(t *testing.T) {
	cfg, err := Load(withEnv(map[string]string{
		"KAFKA_SASL_MECHANISM": "aws_msk_iam", "KAFKA_TLS_ENABLED": "true", "AWS_REGION": "eu-west-1",
		"AWS_ACCESS_KEY_ID": "AKIDEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret-Zq9",
	}))
	if err != nil {
		t.Fatal(err)
	}
	cc, err := cfg.consumerConfig()
	if err != nil {
		t.Fatal(err)
	}
	// Every connection of the worker dials through kafkaio.Conn, which authenticates with cc.SASL
	// (kafkaio's TestConnSecure).
	if !strings.HasPrefix(fmt.Sprint(cc.SASL), "SASL AWS_MSK_IAM as ") {
		t.Errorf("SASL %v is not AWS_MSK_IAM on every connection", cc.SASL)
	}
	_, err = Load(withEnv(map[string]string{"KAFKA_SASL_MECHANISM": "AWS_MSK_IAM", "AWS_REGION": "eu-west-1", "KAFKA_SASL_PASSWORD": "pw-Zq9"}))
	for _, want := range []string{"KAFKA_SASL_PASSWORD: not used", "KAFKA_TLS_ENABLED=true"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load = %v, want a problem saying %q", err, want)
		}
	}
	if err != nil && strings.Contains(err.Error(), "Zq9") {
		t.Errorf("a problem shows a secret: %v", err)
	}
}
