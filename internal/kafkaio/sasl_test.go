package kafkaio_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/segmentio/kafka-go/sasl"
)

// TestMSKIAMPayload proves that AWS_MSK_IAM sends the payload AWS documents for MSK IAM
// (github.com/aws/aws-msk-iam-auth, "Details"): a JSON object with version 2020_10_22, the
// broker host, a user agent, action kafka-cluster:Connect and the SigV4 query-signing fields for
// service kafka-cluster in the configured region, with the session token; the secret key is not
// in it, and the mechanism prints no credential.
func TestMSKIAMPayload(t *testing.T) {
	creds := credentials.NewStaticCredentialsProvider("AKIDEXAMPLE", "secret-Zq9", "token-Zq9")
	m, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: "aws_msk_iam", AWSCredentials: creds, AWSRegion: "eu-west-1"})
	if err != nil {
		t.Fatal(err)
	}
	if m.Name() != "AWS_MSK_IAM" {
		t.Errorf("Name = %q", m.Name())
	}
	ctx := sasl.WithMetadata(context.Background(), &sasl.Metadata{Host: "b-1.msk.example.com", Port: 9098})
	sess, payload, err := m.Start(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]string
	if err := json.Unmarshal(payload, &got); err != nil {
		t.Fatalf("payload %s: %v", payload, err)
	}
	day := time.Now().UTC().Format("20060102")
	for key, want := range map[string]string{
		"version":              `^2020_10_22$`,
		"host":                 `^b-1\.msk\.example\.com$`,
		"user-agent":           `.`,
		"action":               `^kafka-cluster:Connect$`,
		"x-amz-algorithm":      `^AWS4-HMAC-SHA256$`,
		"x-amz-credential":     `^AKIDEXAMPLE/` + day + `/eu-west-1/kafka-cluster/aws4_request$`,
		"x-amz-date":           `^` + day + `T\d{6}Z$`,
		"x-amz-security-token": `^token-Zq9$`,
		"x-amz-signedheaders":  `^host$`,
		"x-amz-expires":        `^\d+$`,
		"x-amz-signature":      `^[0-9a-f]{64}$`,
	} {
		if !regexp.MustCompile(want).MatchString(got[key]) {
			t.Errorf("%s = %q, want %s", key, got[key], want)
		}
	}
	if strings.Contains(string(payload), "secret-Zq9") {
		t.Errorf("the payload holds the secret key")
	}
	if done, _, err := sess.Next(ctx, nil); !done || err != nil {
		t.Errorf("Next = %v, %v: the exchange ends with the broker's answer", done, err)
	}
	if _, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: "AWS_MSK_IAM"}); err == nil {
		t.Errorf("AWS_MSK_IAM without credentials and region: no error")
	}
}
