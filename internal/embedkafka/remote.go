package embedkafka

import (
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// Remote is a Kafka-protocol cluster that this process did not start, such as a real Apache Kafka
// run by the tests: Cluster's topic helpers over a client of its own. Its methods are safe for
// concurrent use.
type Remote struct {
	topics
	conn     kafkaio.Conn
	client   *kafkaio.Client
	producer *kafkaio.Producer
}

// Dial returns the helpers of the cluster that conn reaches (its TLS and SASL settings included);
// CreateTopic gives new topics replication copies of each partition. Nothing is dialled until a
// helper runs. The caller must call Close.
func Dial(conn kafkaio.Conn, replication int) *Remote {
	if conn.ClientID == "" {
		conn.ClientID = "embedkafka"
	}
	r := &Remote{conn: conn, client: conn.Client(10 * time.Second)}
	r.producer = kafkaio.NewProducer(r.client, kafkaio.ProducerConfig{Attempts: 1})
	r.topics = topics{conns: func() (*kafkaio.Client, *kafkaio.Producer) { return r.client, r.producer }, replication: replication}
	return r
}

// Addrs returns the brokers' host:port addresses that Dial was given.
func (r *Remote) Addrs() []string { return r.conn.Brokers }

// Close closes the idle connections of the helpers' client.
func (r *Remote) Close() { kafkaio.CloseIdle(r.client) }
