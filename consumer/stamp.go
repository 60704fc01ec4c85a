package consumer

// The processed-time header (Config.ProcessedHeader): every output record says when this stage
// produced it, so that a rebuild under processing time can select the records of the last window
// by that time rather than by their timestamps, which are the input's.

import (
	"encoding/binary"
	"time"

	"github.com/kdedup/kdedup/internal/kafkaio"
)

// stamp gives every record of out a header name holding at (see Config.ProcessedHeader), placed
// before the mark header of a record marked in ModeMark so that the mark stays last. The headers
// of the batch share one arena, st.stamps, reused from batch to batch.
func (st *partitionState) stamp(out []kafkaio.Record, name string, mark bool, markHeader string, at time.Time) {
	st.stampAt = binary.BigEndian.AppendUint64(st.stampAt[:0], uint64(at.UnixMilli()))
	value := st.stampAt[:8:8]
	need := 0
	for i := range out {
		need += len(out[i].Headers) + 1
	}
	if cap(st.stamps) < need {
		st.stamps = make([]kafkaio.Header, 0, need)
	}
	arena := st.stamps[:0]
	h := kafkaio.Header{Key: name, Value: value}
	for i := range out {
		m := &out[i]
		start := len(arena)
		if mark && isMarked(m.Headers, markHeader) {
			last := len(m.Headers) - 1
			arena = append(append(append(arena, m.Headers[:last]...), h), m.Headers[last])
		} else {
			arena = append(append(arena, m.Headers...), h)
		}
		m.Headers = arena[start:len(arena):len(arena)]
	}
	st.stamps = arena
}

// processedAt returns the time of the header name among headers (see Config.ProcessedHeader), or
// false when there is none of 8 bytes.
func processedAt(headers []kafkaio.Header, name string) (time.Time, bool) {
	for i := len(headers) - 1; i >= 0; i-- {
		if h := &headers[i]; h.Key == name && len(h.Value) == 8 {
			return time.UnixMilli(int64(binary.BigEndian.Uint64(h.Value))), true
		}
	}
	return time.Time{}, false
}
