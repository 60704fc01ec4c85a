package consumer

import (
	"slices"
	"testing"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// TestStamp: every output record gets the processed-time header after its own headers and
// before the mark header of a marked duplicate (which must stay last for isMarked), the input's
// headers are not changed, and processedAt reads the time back.
func TestStamp(t *testing.T) {
	own := []kafkaio.Header{{Key: "a", Value: []byte("1")}}
	out := []kafkaio.Record{
		{Key: []byte("plain"), Headers: own},
		{Key: []byte("none")},
		{Key: []byte("marked"), Headers: []kafkaio.Header{own[0], {Key: DefaultMarkHeader, Value: []byte(MarkValue)}}},
	}
	at := time.UnixMilli(1_790_000_000_123)
	st := &partitionState{}
	for range 2 { // the arena is reused by the next batch
		batch := append([]kafkaio.Record(nil), out...)
		st.stamp(batch, "processed", true, DefaultMarkHeader, at)
		want := [][]string{{"a", "processed"}, {"processed"}, {"a", "processed", DefaultMarkHeader}}
		for i, m := range batch {
			var keys []string
			for _, h := range m.Headers {
				keys = append(keys, h.Key)
			}
			if !slices.Equal(keys, want[i]) {
				t.Errorf("%s: headers %v, want %v", m.Key, keys, want[i])
			}
			if got, ok := processedAt(m.Headers, "processed"); !ok || !got.Equal(at) {
				t.Errorf("%s: processedAt = %v, %v; want %v", m.Key, got, ok, at)
			}
		}
		if !isMarked(batch[2].Headers, DefaultMarkHeader) || isMarked(batch[0].Headers, DefaultMarkHeader) {
			t.Error("the mark header is no longer last")
		}
		clear(st.stamps)
	}
	if len(own) != 1 || len(out[0].Headers) != 1 {
		t.Error("the input's headers changed")
	}
	if _, ok := processedAt(own, "processed"); ok {
		t.Error("processedAt found a header that is not there")
	}
}
