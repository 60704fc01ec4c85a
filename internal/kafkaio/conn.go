package kafkaio

import (
	"crypto/tls"
	"time"

	"github.com/segmentio/kafka-go"
	"github.com/segmentio/kafka-go/sasl"
)

// DefaultClientID is the client ID of a Conn that sets none.
const DefaultClientID = "kdedup"

// Conn is how kdedup reaches one Kafka cluster: the brokers, the client ID and the TLS and SASL
// settings. Every kafka-go Client, Transport and Dialer kdedup uses is made by its methods (Client,
// Transport, Dialer), so a setting added here reaches every connection: the consumer group, the
// partition readers, metadata and offset requests, fetches, the producer and its idempotent
// initialisation, the output reader and the loadtest. A Conn is a plain value; its methods are
// safe for concurrent use.
type Conn struct {
	// Brokers are the bootstrap brokers, host:port. Required.
	Brokers []string
	// ClientID is sent to the brokers with every request. Default: DefaultClientID.
	ClientID string
	// TLS, when not nil, secures every connection. It is used as is (not cloned).
	TLS *tls.Config
	// SASL, when not nil, authenticates every connection.
	SASL sasl.Mechanism
}

func (c Conn) clientID() string {
	if c.ClientID == "" {
		return DefaultClientID
	}
	return c.ClientID
}

// Transport returns a new kafka-go Transport with c's settings: its own connection pool, dials
// that time out after 5s, and cached metadata refreshed every 2s (topic lookups and produce
// routing read it; a short TTL notices created topics and moved leaders quickly). Its
// connections are secured and authenticated by c (see Conn.dial), so they re-authenticate their
// SASL sessions before the broker's session lifetime ends.
func (c Conn) Transport() *kafka.Transport {
	return &kafka.Transport{
		Dial:        c.dial,
		DialTimeout: 5 * time.Second,
		MetadataTTL: 2 * time.Second,
		ClientID:    c.clientID(),
	}
}

// clientIDOf returns the client ID of c's Transport (made by Conn.Transport), else
// DefaultClientID.
func clientIDOf(c *kafka.Client) string {
	if tr, ok := c.Transport.(*kafka.Transport); ok && tr.ClientID != "" {
		return tr.ClientID
	}
	return DefaultClientID
}

// Client returns a kafka-go Client of c's brokers over a new Transport (see Transport) whose
// requests time out after timeout (0: kafka-go's default of 5s). Release its connections with
// CloseIdle.
func (c Conn) Client(timeout time.Duration) *kafka.Client {
	return &kafka.Client{Addr: kafka.TCP(c.Brokers...), Transport: c.Transport(), Timeout: timeout}
}

// Dialer returns a kafka-go Dialer with c's settings, for the connections opened outside the
// Transport (Check's, and kafka-go's Reader in benchmarks). Dials
// time out after 10s. Like the Transport's, its connections are secured and authenticated by c
// (see Conn.dial) and re-authenticate their SASL sessions in place.
func (c Conn) Dialer() *kafka.Dialer {
	return &kafka.Dialer{
		ClientID:  c.clientID(),
		Timeout:   10 * time.Second,
		DualStack: true,
		DialFunc:  c.dial,
	}
}

// CloseIdle closes the idle connections of a Client made by Conn.Client. A later request opens
// new ones. It does nothing for a Client with another kind of Transport.
func CloseIdle(client *kafka.Client) {
	if tr, ok := client.Transport.(*kafka.Transport); ok {
		tr.CloseIdleConnections()
	}
}
