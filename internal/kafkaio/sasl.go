package kafkaio

import (
	"context"
	"fmt"
	"strings"

	"github.com/aws/aws-sdk-go-v2/aws"
	signer "github.com/aws/aws-sdk-go-v2/aws/signer/v4"
	"github.com/segmentio/kafka-go/sasl"
	awsmskiam "github.com/segmentio/kafka-go/sasl/aws_msk_iam_v2"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/segmentio/kafka-go/sasl/scram"
)

// The SASL mechanisms kdedup speaks, in Kafka's spelling.
const (
	MechanismPlain     = "PLAIN"
	MechanismSCRAM256  = "SCRAM-SHA-256"
	MechanismSCRAM512  = "SCRAM-SHA-512"
	MechanismAWSMSKIAM = "AWS_MSK_IAM"
)

// Mechanisms lists the SASL mechanisms NewSASL accepts.
var Mechanisms = []string{MechanismPlain, MechanismSCRAM256, MechanismSCRAM512, MechanismAWSMSKIAM}

// CanonicalMechanism returns the Kafka spelling of a mechanism name given in any case, and
// whether it is one of Mechanisms.
func CanonicalMechanism(name string) (string, bool) {
	for _, m := range Mechanisms {
		if strings.EqualFold(name, m) {
			return m, true
		}
	}
	return name, false
}

// SASLConfig is what a SASL mechanism needs: its name (any case) and the credentials.
type SASLConfig struct {
	// Mechanism is one of Mechanisms, in any case.
	Mechanism string
	// Username and Password are the credentials of PLAIN and SCRAM.
	Username, Password string
	// AWSCredentials and AWSRegion sign AWS_MSK_IAM authentication (AWS SigV4, service
	// kafka-cluster, action kafka-cluster:Connect); both are required with it. The credentials
	// are retrieved on every new connection, so refreshed ones (web identity, instance role) are
	// used as they change.
	AWSCredentials aws.CredentialsProvider
	AWSRegion      string
}

// SASL is a SASL mechanism that knows the user it authenticates as, so that an authentication
// failure can name it, and that never prints its credentials (fmt's verbs print only the
// mechanism and the user). It is safe for concurrent use.
type SASL struct {
	mech sasl.Mechanism
	name string
	user string
}

// NewSASL returns the mechanism of c. The error names a mechanism kdedup does not speak.
func NewSASL(c SASLConfig) (*SASL, error) {
	name, ok := CanonicalMechanism(c.Mechanism)
	if !ok {
		return nil, fmt.Errorf("kafkaio: SASL mechanism %q is not one of %s", c.Mechanism, strings.Join(Mechanisms, ", "))
	}
	s := &SASL{name: name, user: c.Username}
	var err error
	switch name {
	case MechanismPlain:
		s.mech = plain.Mechanism{Username: c.Username, Password: c.Password}
	case MechanismSCRAM256:
		s.mech, err = scram.Mechanism(scram.SHA256, c.Username, c.Password)
	case MechanismSCRAM512:
		s.mech, err = scram.Mechanism(scram.SHA512, c.Username, c.Password)
	case MechanismAWSMSKIAM:
		if c.AWSCredentials == nil || c.AWSRegion == "" {
			return nil, fmt.Errorf("kafkaio: SASL %s needs AWS credentials and a region", name)
		}
		s.user = "AWS credentials, region " + c.AWSRegion
		s.mech = &awsmskiam.Mechanism{Signer: signer.NewSigner(), Credentials: c.AWSCredentials, Region: c.AWSRegion}
		return s, nil
	}
	if err != nil { // scram: a user name or password that SASLprep refuses; never repeat them
		return nil, fmt.Errorf("kafkaio: SASL %s: the user name or password is not valid UTF-8 text (SASLprep)", name)
	}
	return s, nil
}

// Name returns the mechanism's name, in Kafka's spelling.
func (s *SASL) Name() string { return s.name }

// User returns the user the mechanism authenticates as (for AWS_MSK_IAM, a description of the
// credentials: the role is the broker's to tell).
func (s *SASL) User() string { return s.user }

// Start starts an exchange; see sasl.Mechanism.
func (s *SASL) Start(ctx context.Context) (sasl.StateMachine, []byte, error) {
	return s.mech.Start(ctx)
}

// String returns the mechanism and the user, never the password.
func (s *SASL) String() string { return fmt.Sprintf("SASL %s as %q", s.name, s.user) }

// Format prints String for every verb, so that %v, %+v and %#v of a config holding s do not
// print the credentials.
func (s *SASL) Format(f fmt.State, _ rune) { fmt.Fprint(f, s.String()) }

// describeSASL returns the mechanism and user of m for an error message.
func describeSASL(m sasl.Mechanism) string {
	if s, ok := m.(*SASL); ok && s.name == MechanismAWSMSKIAM {
		return fmt.Sprintf("mechanism %s (%s: check the role's kafka-cluster:Connect permission)", s.name, s.user)
	}
	if s, ok := m.(*SASL); ok {
		return fmt.Sprintf("mechanism %s, user %q", s.name, s.user)
	}
	return "mechanism " + m.Name()
}
