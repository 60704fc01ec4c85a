package kafkaio_test

import (
	"context"
	"crypto/tls"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/plain"
	"github.com/twmb/franz-go/pkg/kfake"
)

// TestConnSettings proves that every constructor passes on the client ID, and dials through the
// Conn, which secures and authenticates the connections (TestConnSecure proves that it does).
func TestConnSettings(t *testing.T) {
	tc := &tls.Config{ServerName: "broker"}
	mech := plain.Mechanism{Username: "u", Password: "p"}
	c := kafkaio.Conn{Brokers: []string{"a:9092", "b:9092"}, TLS: tc, SASL: mech}
	tr := c.Transport()
	if tr.ClientID != kafkaio.DefaultClientID || tr.Dial == nil || tr.TLS != nil || tr.SASL != nil || tr.MetadataTTL <= 0 {
		t.Errorf("Transport %+v lacks the settings", tr)
	}
	d := c.Dialer()
	if d.ClientID != kafkaio.DefaultClientID || d.DialFunc == nil || d.TLS != nil || d.SASLMechanism != nil {
		t.Errorf("Dialer %+v lacks the settings", d)
	}
	c.ClientID = "me"
	cl := c.Client(3 * time.Second)
	if cl.Timeout != 3*time.Second || cl.Addr.String() != "a:9092,b:9092" || cl.Transport.(*kafka.Transport).ClientID != "me" {
		t.Errorf("Client %+v lacks the settings", cl)
	}
	kafkaio.CloseIdle(cl)
	kafkaio.CloseIdle(&kafka.Client{}) // another transport: nothing to do
}

// TestConnSASL proves against a broker that requires SASL PLAIN that the Client and the Dialer
// of a Conn authenticate, and that wrong credentials fail.
func TestConnSASL(t *testing.T) {
	tier.Integration(t)
	c, err := kfake.NewCluster(kfake.Ports(0), kfake.SeedTopics(1, "t"), kfake.EnableSASL(),
		kfake.Superuser("PLAIN", "admin", "secret"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, tc := range []struct {
		name     string
		password string
		ok       bool
	}{{"right password", "secret", true}, {"wrong password", "wrong", false}} {
		t.Run(tc.name, func(t *testing.T) {
			conn := kafkaio.Conn{Brokers: c.ListenAddrs(), SASL: plain.Mechanism{Username: "admin", Password: tc.password}}
			client := conn.Client(5 * time.Second)
			defer kafkaio.CloseIdle(client)
			_, err := kafkaio.PartitionCount(ctx, client, "t")
			if (err == nil) != tc.ok {
				t.Errorf("metadata through the Client: %v", err)
			}
			dc, err := conn.Dialer().DialContext(ctx, "tcp", c.ListenAddrs()[0])
			if err == nil {
				_, err = dc.ReadPartitions("t")
				dc.Close()
			}
			if (err == nil) != tc.ok {
				t.Errorf("a connection of the Dialer: %v", err)
			}
		})
	}
}
