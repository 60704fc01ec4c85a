//go:build linux

package consumer_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"os"
	"runtime/debug"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kdedup/kdedup/consumer"
	"github.com/kdedup/kdedup/internal/embedkafka/testbroker"
	"github.com/kdedup/kdedup/internal/kafkaio"
	"github.com/klauspost/compress/zstd"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/kversion"
)

// Decoding bombs: record batches small on the wire that a naive decoder expands into gigabytes.
// They are built here byte by byte, as a hostile producer would, and streamed through the
// compressor, so the test never holds them uncompressed.

// bombRecords streams records into w: n records with a null key and a value of size zero bytes
// each, or, when headers > 0, one record without key and value and headers empty headers.
func bombRecords(w *zstd.Encoder, n, size, headers int) error {
	zeros := make([]byte, 1<<20)
	put := func(b []byte) {
		if _, err := w.Write(b); err != nil {
			panic(err)
		}
	}
	zeroBytes := func(n int) {
		for ; n > 0; n -= min(n, len(zeros)) {
			put(zeros[:min(n, len(zeros))])
		}
	}
	v := func(b []byte, x int64) []byte { return binary.AppendVarint(b, x) }
	if headers > 0 {
		body := v(v(v(v([]byte{0}, 0), 0), -1), -1) // attributes, deltas, null key and value
		body = v(body, int64(headers))
		put(v(nil, int64(len(body)+2*headers)))
		put(body)
		zeroBytes(2 * headers) // each header: empty name, empty value
		return w.Close()
	}
	for i := range n {
		head := v(v(v(v([]byte{0}, 0), int64(i)), -1), int64(size))
		put(v(nil, int64(len(head)+size+1)))
		put(head)
		zeroBytes(size)
		put([]byte{0}) // no headers
	}
	return w.Close()
}

// bombBatch returns a zstd record batch (magic v2, sealed) of the records bombRecords writes.
func bombBatch(t *testing.T, n, size, headers int) []byte {
	t.Helper()
	var records bytes.Buffer
	enc, err := zstd.NewWriter(&records, zstd.WithEncoderLevel(zstd.SpeedFastest))
	if err != nil {
		t.Fatal(err)
	}
	if err := bombRecords(enc, n, size, headers); err != nil {
		t.Fatal(err)
	}
	hdr := kmsg.RecordBatch{PartitionLeaderEpoch: -1, Magic: 2, Attributes: 4, LastOffsetDelta: int32(n - 1),
		FirstTimestamp: time.Now().UnixMilli(), MaxTimestamp: time.Now().UnixMilli(), ProducerID: -1, ProducerEpoch: -1,
		FirstSequence: -1, NumRecords: int32(n), Records: records.Bytes()}
	return sealBatch(hdr)
}

// produceRaw writes the record batch b to partition p of topic, as it is, and fails the test
// if the broker refuses it.
func produceRaw(t *testing.T, addrs []string, topic string, p int32, b []byte) {
	t.Helper()
	if code := produceRawCode(t, addrs, topic, p, b); code != 0 {
		t.Fatalf("produce of the bomb to partition %d: %v", p, kerr.ErrorForCode(code))
	}
}

// produceRawCode writes the record batch b to partition p of topic, as it is, and returns the
// broker's error code for it (0 when it was appended).
func produceRawCode(t *testing.T, addrs []string, topic string, p int32, b []byte) int16 {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(addrs...), kgo.MaxVersions(kversion.V3_9_0())) // Produce by topic name
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	req := kmsg.NewPtrProduceRequest()
	req.Acks, req.TimeoutMillis = -1, 10000
	rt := kmsg.NewProduceRequestTopic()
	rt.Topic = topic
	rp := kmsg.NewProduceRequestTopicPartition()
	rp.Partition, rp.Records = p, b
	rt.Partitions = append(rt.Partitions, rp)
	req.Topics = append(req.Topics, rt)
	res, err := cl.Request(context.Background(), req)
	if err != nil {
		t.Fatal(err)
	}
	return res.(*kmsg.ProduceResponse).Topics[0].Partitions[0].ErrorCode
}

// peakRSS returns the process's peak resident set size (VmHWM) in bytes; resetPeakRSS starts
// it again from the current RSS.
func peakRSS(t *testing.T) int64 {
	t.Helper()
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			kb, err := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 10, 64)
			if err != nil {
				t.Fatal(err)
			}
			return kb << 10
		}
	}
	t.Fatal("no VmHWM in /proc/self/status")
	return 0
}

func resetPeakRSS(t *testing.T) {
	t.Helper()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		t.Skipf("cannot reset the peak RSS: %v", err)
	}
}

// TestInputBombs is the end-to-end check of hostile input, on kfake and on real Kafka (see
// testbroker). Six input partitions carry
// traffic; partition 0 then receives a zstd batch of sixteen 64 MiB zero values (about 1 GiB
// decompressed, a few hundred KiB on the wire) and partition 1 a zstd batch of one record with
// 10 million empty headers, then more traffic everywhere. With the default limits (fetch 4 MiB,
// decode 16 MiB), the worker's peak RSS stays under 512 MiB and it keeps running; the other
// partitions deliver everything, and the bomb partitions every record before their bomb.
// Without a dead-letter topic, the bomb partitions block at the bomb (committed up to it,
// kdedup_partition_blocked's observer call, a log line naming the limit and the offsets); with
// one, each bomb becomes a dead letter with its offsets and error, everything else is delivered
// and the input is committed to its end.
//
// Both bombs are within a real broker's limits: each is a few hundred KiB on the wire, under
// message.max.bytes (1 MiB), and its LogValidator, which streams a compressed batch's records to
// check them without keeping their values, finds nothing wrong with zero-filled values or empty
// headers. Real Kafka 4.4 appends both (produceRaw fails the test otherwise), so the worker's own
// limits are what stand between them and its memory there too.
func TestInputBombs(t *testing.T) {
	bombs := map[int32][]byte{0: bombBatch(t, 16, 64<<20, 0), 1: bombBatch(t, 1, 0, 10_000_000)}
	for p, b := range bombs {
		t.Logf("bomb of partition %d: %d bytes on the wire", p, len(b))
	}
	for _, dlq := range []bool{false, true} {
		t.Run(fmt.Sprintf("dead-letter=%v", dlq), func(t *testing.T) {
			testbroker.Each(t, testbroker.Options{}, func(t *testing.T, b testbroker.Broker) { testInputBombs(t, b, bombs, dlq) })
		})
	}
}

func testInputBombs(t *testing.T, b testbroker.Broker, bombs map[int32][]byte, dlq bool) {
	const parts, half = 6, 50
	e := newEnvOn(t, b, parts, parts)
	dlqTopic := b.Name("dlq")
	if err := b.CreateTopic(t.Context(), dlqTopic, 1); err != nil {
		t.Fatal(err)
	}
	in := make([][]kafkaio.Record, parts)
	for p := range parts {
		in[p] = presentStream(p, 2*half)
		e.produce(p, in[p][:half])
	}
	cfg := e.config()
	if dlq {
		cfg.DeadLetterTopic = dlqTopic
	}
	logs := &captureHandler{}
	resetPeakRSS(t)
	t.Logf("RSS before the worker starts: %d MiB", peakRSS(t)>>20)
	r := e.startLogged(cfg, newMapDeduper(false, nil), keyFuncFor(t, "key"), slog.New(logs))
	eventually(t, 30*time.Second, "the first half committed", func() bool {
		for p := range parts {
			if e.committed(p) != half {
				return false
			}
		}
		return true
	})
	bombEnd := map[int]int64{0: half + 16, 1: half + 1}
	for p, b := range bombs {
		produceRaw(t, e.cl.Addrs(), e.in, p, b)
	}
	for p := range parts {
		e.produce(p, in[p][half:]) // after the bombs: offsets shift past them
	}
	if dlq {
		e.waitAllCommitted(60 * time.Second)
	} else {
		eventually(t, 60*time.Second, "partitions 2-5 committed, 0 and 1 blocked at their bombs", func() bool {
			for p := 2; p < parts; p++ {
				if e.committed(p) != 2*half {
					return false
				}
			}
			return blockedAt(r.w, map[int32]int64{0: half, 1: half})
		})
	}
	if peak := peakRSS(t); peak > 512<<20 && !raceEnabled {
		t.Errorf("peak RSS %d MiB, want at most 512 MiB", peak>>20)
	} else {
		t.Logf("peak RSS %d MiB", peak>>20)
	}
	select {
	case err := <-r.done:
		t.Fatalf("the worker exited: %v", err)
	default:
	}
	got := e.readOut(e.out)
	for p := range parts {
		want := in[p]
		if !dlq && (p == 0 || p == 1) {
			want = in[p][:half]
			if c := e.committed(p); c != half {
				t.Errorf("partition %d committed up to %d, want %d (the bomb's offset)", p, c, half)
			}
		}
		compareSeq(t, fmt.Sprintf("output partition %d", p), got[p], want)
	}
	if dlq {
		checkBombDeadLetters(t, e.readOut(dlqTopic)[0], e.in, bombEnd)
		return
	}
	// At the default decode limit of 16 MiB, the 10 million empty headers (about 20 MB
	// decompressed) go over the batch limit before the header limit (65536 per record).
	for _, want := range []string{"offset=50 last_offset=65", "offset=50 last_offset=50"} {
		if logs.countFull(want) == 0 {
			t.Errorf("no log line names %q", want)
		}
	}
	if n := logs.countFull("more than 16777216 bytes"); n < 2 {
		t.Errorf("%d log lines name the batch limit of 16777216 bytes, want one per bomb", n)
	}
	for _, b := range r.w.Blocked() {
		if b.Topic != e.in || b.Error == "" {
			t.Errorf("blocked %+v", b)
		}
	}
	if reason, _ := r.obs.blocked.Load(int32(0)); reason != kafkaio.RefusalInputTooLarge {
		t.Errorf("observer: partition 0 blocked for %v, want %s", reason, kafkaio.RefusalInputTooLarge)
	}
}

// checkBombDeadLetters checks that there is one dead letter per bomb, without content, naming its
// offsets and its error.
func checkBombDeadLetters(t *testing.T, dl []kafkaio.Record, in string, bombEnd map[int]int64) {
	t.Helper()
	if len(dl) != len(bombEnd) {
		t.Fatalf("%d dead letters, want %d", len(dl), len(bombEnd))
	}
	for _, m := range dl {
		hs := map[string]string{}
		for _, h := range m.Headers {
			hs[h.Key] = string(h.Value)
		}
		p, _ := strconv.Atoi(hs[consumer.DeadLetterHeaderSourcePartition])
		want := map[string]string{
			consumer.DeadLetterHeaderSourceOffset:     "50",
			consumer.DeadLetterHeaderSourceLastOffset: strconv.FormatInt(bombEnd[p]-1, 10),
			consumer.DeadLetterHeaderSourceTopic:      in,
		}
		for k, v := range want {
			if hs[k] != v {
				t.Errorf("dead letter of partition %d: header %s = %q, want %q", p, k, hs[k], v)
			}
		}
		if m.Key != nil || len(m.Value) != 0 || hs[consumer.DeadLetterHeaderErrorMessage] == "" || hs[consumer.DeadLetterHeaderError] == "" {
			t.Errorf("dead letter of partition %d: key %q, %d value bytes, headers %v", p, m.Key, len(m.Value), hs)
		}
	}
}
