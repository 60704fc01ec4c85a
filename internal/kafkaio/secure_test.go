package kafkaio_test

import (
	"context"
	"crypto/tls"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/testpki"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/twmb/franz-go/pkg/kfake"
)

// securePKI is a CA, a broker certificate for 127.0.0.1 and the name "broker.test", and a client
// certificate for mutual TLS.
type securePKI struct {
	ca             *testpki.CA
	broker, client *testpki.Leaf
}

func newSecurePKI(t *testing.T) securePKI {
	t.Helper()
	ca, err := testpki.NewCA("kdedup test CA")
	if err != nil {
		t.Fatal(err)
	}
	broker, err := ca.Issue(testpki.LeafOptions{Name: "broker", Hosts: []string{"127.0.0.1", "broker.test"}})
	if err != nil {
		t.Fatal(err)
	}
	client, err := ca.Issue(testpki.LeafOptions{Name: "kdedup", Client: true})
	if err != nil {
		t.Fatal(err)
	}
	return securePKI{ca: ca, broker: broker, client: client}
}

// TestConnSecure proves against brokers that require TLS (with a custom CA, mutual TLS and a
// server name other than the address) and each SASL mechanism that every Conn constructor
// authenticates: the Client (metadata), the Dialer, and the Producer on the Client.
func TestConnSecure(t *testing.T) {
	t.Parallel()
	tier.Integration(t)
	pki := newSecurePKI(t)
	for _, mech := range []string{kafkaio.MechanismPlain, kafkaio.MechanismSCRAM256, kafkaio.MechanismSCRAM512} {
		t.Run(mech, func(t *testing.T) {
			t.Parallel()
			c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "t"), kfake.EnableSASL(),
				kfake.Superuser(mech, "svc", "s3cr3t-"+mech), kfake.TLS(testpki.ServerTLS(pki.broker, pki.ca.Pool())))
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			m, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: strings.ToLower(mech), Username: "svc", Password: "s3cr3t-" + mech})
			if err != nil {
				t.Fatal(err)
			}
			if s := fmt.Sprintf("%v %+v %#v %s", m, m, m, m); strings.Contains(s, "s3cr3t") {
				t.Errorf("the mechanism prints its password: %s", s)
			}
			tc := &tls.Config{RootCAs: pki.ca.Pool(), Certificates: []tls.Certificate{pki.client.TLS}, ServerName: "broker.test"}
			conn := kafkaio.Conn{Brokers: c.ListenAddrs(), TLS: tc, SASL: m}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			client := conn.Client(5 * time.Second)
			defer kafkaio.CloseIdle(client)
			if _, err := kafkaio.PartitionCount(ctx, client, "t"); err != nil {
				t.Fatalf("metadata through the Client: %v", err)
			}
			p := kafkaio.NewProducer(client, kafkaio.ProducerConfig{Attempts: 1, Idempotent: true})
			if err := p.Start(ctx); err != nil {
				t.Fatalf("idempotent producer init: %v", err)
			}
			dc, err := conn.Dialer().DialContext(ctx, "tcp", c.ListenAddrs()[0])
			if err != nil {
				t.Fatalf("a connection of the Dialer: %v", err)
			}
			defer dc.Close()
			if _, err := dc.ReadPartitions("t"); err != nil {
				t.Fatalf("metadata on a connection of the Dialer: %v", err)
			}
		})
	}
}
