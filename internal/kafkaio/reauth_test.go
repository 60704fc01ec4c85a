package kafkaio_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/kdedup/kdedup/internal/tier"
	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl/scram"
	"github.com/twmb/franz-go/pkg/kfake"
)

// reauthCluster returns a kfake cluster that requires SCRAM-SHA-512 and enforces a session
// lifetime (testbroker.SessionExpiry), and a Conn that authenticates to it.
func reauthCluster(t *testing.T, lifetime time.Duration) (*kfake.Cluster, *testbroker.SessionExpiry, kafkaio.Conn) {
	tier.Integration(t)
	t.Helper()
	exp := testbroker.NewSessionExpiry(lifetime)
	opts := append([]kfake.Opt{kfake.Ports(0), kfake.SeedTopics(1, "t"), kfake.EnableSASL(),
		kfake.Superuser(kafkaio.MechanismSCRAM512, "svc", "pw-reauth-Zq9")}, exp.Opts()...)
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	m, err := kafkaio.NewSASL(kafkaio.SASLConfig{Mechanism: kafkaio.MechanismSCRAM512, Username: "svc", Password: "pw-reauth-Zq9"})
	if err != nil {
		t.Fatal(err)
	}
	return c, exp, kafkaio.Conn{Brokers: c.ListenAddrs(), SASL: m}
}

// everyUntil calls f every tick until d has passed, and returns the first error.
func everyUntil(d, tick time.Duration, f func() error) error {
	end := time.Now().Add(d)
	t := time.NewTicker(tick)
	defer t.Stop()
	for time.Now().Before(end) {
		if err := f(); err != nil {
			return err
		}
		<-t.C
	}
	return nil
}

// TestReauthentication proves that the connections of a Conn's Client and Dialer re-authenticate
// their SASL sessions in place before a broker that enforces a 2s lifetime closes them: requests
// flow for three lifetimes on the same pooled connections (metadata, produce, and a Dialer
// connection shared by concurrent requests, as kafka-go's ConsumerGroup shares its coordinator's),
// none fails, none is closed for expiry, and the broker saw re-authentications. kafka-go's own
// SASL, which never re-authenticates, is closed for expiry on the same broker.
func TestReauthentication(t *testing.T) {
	t.Parallel()
	const lifetime = 2 * time.Second
	c, exp, conn := reauthCluster(t, lifetime)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	client := conn.Client(5 * time.Second)
	defer kafkaio.CloseIdle(client)
	p := kafkaio.NewProducer(client, kafkaio.ProducerConfig{Attempts: 1, Idempotent: true})
	if err := p.Start(ctx); err != nil {
		t.Fatal(err)
	}
	dc, err := conn.Dialer().DialContext(ctx, "tcp", c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer dc.Close()
	before := kafkaio.Reauthentications()
	err = everyUntil(3*lifetime, 100*time.Millisecond, func() error {
		if _, err := kafkaio.PartitionCount(ctx, client, "t"); err != nil {
			return err
		}
		if err := produceOne(ctx, p); err != nil {
			return err
		}
		return concurrently(4, func() error { _, err := dc.ReadPartitions("t"); return err })
	})
	if err != nil {
		t.Fatalf("a request across session lifetimes: %v", err)
	}
	if exp.Expired() != 0 || exp.Reauthenticated() == 0 || kafkaio.Reauthentications() == before {
		t.Errorf("%d connections closed for expiry (want 0), %d re-authentications seen by the broker, %d made (want > 0)",
			exp.Expired(), exp.Reauthenticated(), kafkaio.Reauthentications()-before)
	}
	t.Logf("%d connections accepted, %d re-authentications, %d closed for expiry", exp.Accepted(), exp.Reauthenticated(), exp.Expired())

	// The control: kafka-go's own SASL on the same broker is closed once its session expired.
	m, _ := scram.Mechanism(scram.SHA512, "svc", "pw-reauth-Zq9")
	kc, err := (&kafka.Dialer{SASLMechanism: m, Timeout: 5 * time.Second}).DialContext(ctx, "tcp", c.ListenAddrs()[0])
	if err != nil {
		t.Fatal(err)
	}
	defer kc.Close()
	_ = everyUntil(2*lifetime, 100*time.Millisecond, func() error { _, err := kc.ReadPartitions("t"); return err })
	if exp.Expired() == 0 {
		t.Errorf("the broker did not close kafka-go's own SASL connection after its session expired: the test proves nothing")
	}
}

// produceOne produces one record to partition 0 of t.
func produceOne(ctx context.Context, p *kafkaio.Producer) error {
	return p.Produce(ctx, "t", 0, []kafkaio.Record{{Value: []byte("v")}})
}

// concurrently runs f on n goroutines and returns the first error.
func concurrently(n int, f func() error) error {
	errs := make(chan error, n)
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() { defer wg.Done(); errs <- f() }()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
