package testbroker_test

import (
	"fmt"
	"os"
	"testing"

	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

func TestMain(m *testing.M) { os.Exit(testbroker.Main(m)) }

// TestHelpers proves the helpers work the same on every kind: records produced to a topic of the
// test's own come back in order, and a group that committed nothing has no offsets.
func TestHelpers(t *testing.T) {
	t.Parallel()
	testbroker.Each(t, testbroker.Options{Topics: map[string]int32{"t": 2}}, func(t *testing.T, b testbroker.Broker) {
		topic := b.Name("t")
		if n, err := b.Partitions(t.Context(), topic); err != nil || n != 2 {
			t.Fatalf("partitions of %s: %d, %v; want 2", topic, n, err)
		}
		var msgs []kafkaio.Record
		for i := range 50 {
			msgs = append(msgs, kafkaio.Record{Key: fmt.Appendf(nil, "k%02d", i), Value: []byte("v")})
		}
		if err := b.Produce(t.Context(), topic, 1, msgs...); err != nil {
			t.Fatal(err)
		}
		got, err := b.ReadAll(t.Context(), topic)
		if err != nil {
			t.Fatal(err)
		}
		if len(got[0]) != 0 || len(got[1]) != 50 || string(got[1][49].Key) != "k49" {
			t.Fatalf("read back %d and %d records, want 0 and 50 in order", len(got[0]), len(got[1]))
		}
		com, err := b.Committed(t.Context(), b.Name("g"), topic)
		if err != nil || com[0] != -1 || com[1] != -1 {
			t.Fatalf("committed offsets of a new group: %v, %v", com, err)
		}
	})
}
