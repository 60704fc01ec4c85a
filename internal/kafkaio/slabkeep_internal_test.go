package kafkaio

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kmsg"
)

// headerBatch returns a sealed batch of n records at offsets [0, n), each with two headers.
func headerBatch(n int) []byte {
	var recs []byte
	for d := range int64(n) {
		m := Record{Key: fmt.Append(nil, d), Value: fmt.Append(nil, "v", d),
			Headers: []Header{{Key: "a", Value: fmt.Append(nil, "a", d)}, {Key: "b", Value: fmt.Append(nil, "b", d)}}}
		recs = appendRecord(recs, &m, d, 0)
	}
	hdr := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, LastOffsetDelta: int32(n - 1),
		ProducerID: -1, ProducerEpoch: -1, FirstSequence: -1, NumRecords: int32(n)}
	rb := recordBatch{raw: append(make([]byte, sizePrefix+batchHeaderLen), recs...), hdr: hdr}
	rb.hdr.Length = int32(len(rb.raw) - sizePrefix - batchLengthStart)
	rb.seal(-1, -1, -1)
	return rb.raw[sizePrefix:]
}

// TestPartitionReaderKeepsSlabWhileWalking checks that a reader that hands out a response in
// several batches decodes each into the record and header slices of the one before, that the
// records and headers of the batch before that the next one did not overwrite are cleared (no
// buffer given back stays reachable from them), and that the slices go to the pool, cleared,
// once the response is walked. Batch.More says which batches leave records of the response.
func TestPartitionReaderKeepsSlabWhileWalking(t *testing.T) {
	t.Parallel()
	c := trailingCluster(t, headerBatch(30), 30)
	r := NewPartitionReader(c, PartitionReaderConfig{Topic: "t", MaxWait: 10 * time.Millisecond})
	defer func() { <-r.Close() }()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	check := func(b *Batch, from int64, n int, more bool) {
		t.Helper()
		if len(b.Records) != n || b.Records[0].Offset != from || b.More != more {
			t.Fatalf("batch of %d records from %d, More %v; want %d from %d, %v", len(b.Records), b.Records[0].Offset, b.More, n, from, more)
		}
		for i, m := range b.Records {
			o := from + int64(i)
			if m.Offset != o || string(m.Value) != fmt.Sprint("v", o) || len(m.Headers) != 2 ||
				string(m.Headers[1].Value) != fmt.Sprint("b", o) {
				t.Fatalf("record %d: %+v", i, m)
			}
		}
	}
	b, err := r.Fetch(ctx, 10, 0)
	if err != nil {
		t.Fatal(err)
	}
	check(b, 0, 10, true)
	recs, hdrs := b.Records[:10], r.hdrs.hdrs[:20]
	if b, err = r.Fetch(ctx, 4, 0); err != nil {
		t.Fatal(err)
	}
	check(b, 10, 4, true)
	if &b.Records[0] != &recs[0] || &r.hdrs.hdrs[0] != &hdrs[0] || r.slabs.held() != 0 {
		t.Fatalf("the second batch of the response is not decoded into the first one's slices (%d free slabs)", r.slabs.held())
	}
	for i := 4; i < 10; i++ {
		if m := recs[i]; m.Key != nil || m.Value != nil || m.Headers != nil {
			t.Errorf("record %d past the batch not cleared: %+v", i, m)
		}
	}
	for i := 8; i < 20; i++ {
		if h := hdrs[i]; h.Value != nil || h.Key != "" {
			t.Errorf("header %d past the batch not cleared: %+v", i, h)
		}
	}
	if b, err = r.Fetch(ctx, 100, 0); err != nil {
		t.Fatal(err)
	}
	check(b, 14, 16, false) // the rest of the response
	short, cancelShort := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancelShort()
	if _, err = r.Fetch(short, 100, 0); err == nil { // the log ends at 30: nothing more comes
		t.Fatal("Fetch past the end of the log returned a batch")
	}
	if n := r.slabs.held(); n != 1 {
		t.Fatalf("%d free slabs once the response was walked, want 1", n)
	}
	for _, m := range r.slabs.free[0].recs[:16] {
		if m.Key != nil || m.Value != nil || m.Headers != nil {
			t.Fatalf("record of a free slab not cleared: %+v", m)
		}
	}
}

// BenchmarkReaderFetch measures PartitionReader.Fetch without a broker: responses of 16 batches of
// 1000 records of the loadtest's shape (loadtestMsgs: three headers) handed to the reader as its
// fetch goroutine hands them, taken in batches of 1000 records, each record's key and value
// looked at. It is what Fetch adds to BenchmarkRecordWalk: the record slices, their headers and
// their memory between batches. ns/op is per record. Against main, in the same run:
//
//	go test -run '^$' -bench ReaderFetch -count 6 ./internal/kafkaio/ | benchstat -
func BenchmarkReaderFetch(b *testing.B) {
	var set []byte
	for i := range 16 {
		batch := testBatch(b, 0, loadtestMsgs()...)
		binary.BigEndian.PutUint64(batch, uint64(i*1000))
		set = append(set, batch...)
	}
	r := &PartitionReader{cfg: PartitionReaderConfig{Topic: "t", MaxBytes: 16 << 20}, pos: -1,
		ready: make(chan *fetched), stopped: make(chan struct{}), done: make(chan struct{}), slabs: newSlabPool(0)}
	r.dec.retain = true
	r.dec.limits = r.cfg.Limits.withDefaults(r.cfg.MaxBytes)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		for {
			f := &fetched{res: &fetchResponse{part: &kmsg.FetchResponseTopicPartition{RecordBatches: set}}, end: 16000, hwm: 16000}
			select {
			case r.ready <- f:
			case <-ctx.Done():
				return
			}
		}
	}()
	b.ReportAllocs()
	b.SetBytes(int64(len(set) / 16000))
	b.ResetTimer()
	sum := 0
	for n := 0; n < b.N; {
		batch, err := r.Fetch(ctx, 1000, 0)
		if err != nil {
			b.Fatal(err)
		}
		for i := range batch.Records {
			sum += len(batch.Records[i].Key) + len(batch.Records[i].Value)
		}
		n += len(batch.Records)
	}
	if sum == 0 {
		b.Fatal("nothing read")
	}
}
