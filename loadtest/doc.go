// Package loadtest generates a deterministic stream of records with known duplicates into a Kafka
// input topic, reads what a deduplication stage wrote to the output topic, and proves the result:
// duplicates that leaked through, unique events that were lost (false positives, compared with a
// Poisson bound for the configured false-positive rate), per-key order violations, end-to-end
// latency and sustained throughput.
//
// The package never reads environment variables; internal/loadrun builds a Config from the flags
// and the environment that cmd/kdedup passes it. This comment is also the manual of that command, kdedup loadtest.
//
// # Running it
//
//	go build -o kdedup ./cmd/kdedup
//	./kdedup loadtest                                   # embedded broker + the real worker, 20 000 records
//	./kdedup loadtest -count 200000 -rate 20000 -json report.json -html report.html
//	KAFKA_BROKERS=kafka-1:9092 KAFKA_INPUT_TOPIC=orders KAFKA_OUTPUT_TOPIC=orders-dedup \
//	DEDUP_KEY=json:order.id DEDUP_WINDOW_COUNT=8 DEDUP_WINDOW_INTERVAL=15m \
//	./kdedup loadtest -count 100000 -rate 5000 -mix immediate=1,within=3   # against a running worker
//
// # Modes
//
// Without -brokers and KAFKA_BROKERS (or with -embedded) it starts an in-process Kafka-protocol
// broker (kfake, over TCP on 127.0.0.1) and the real worker, configured through the same
// environment parsing and wiring as production (-worker-env NAME=VALUE adds or overrides worker
// variables, e.g. CHECKPOINT_DIR), then the generator and the verifier. Against real brokers it
// only generates and verifies: the worker runs elsewhere, and the window, key and scope settings
// default to the same DEDUP_* variables the worker reads (flags override them; TLS/SASL come from
// KAFKA_TLS_* / KAFKA_SASL_*). Both topics must exist; records of other runs in them are ignored.
//
// # Flags
//
//   - -count (default 20000): records to send, duplicates included.
//   - -rate (default 0): records per second; 0 = as fast as the brokers accept.
//   - -entities, -key-size, -value-size (defaults 1000, 16, 100): distinct Kafka keys (placed by
//     murmur2 like the Java client), sizes in bytes.
//   - -dups (default 0.2): fraction of the records that are duplicates (0 … 0.95).
//   - -late (default 0): fraction of the records that are late: unique events (no duplicates)
//     whose Kafka timestamp is 24 h (LateAge) before their creation, spread evenly; every other
//     record is stamped at its creation. Under DEDUP_WINDOW_CLOCK=event the worker counts them in
//     kdedup_filter_late_records_total and, with DEDUP_LATE_RECORDS=pass (the default), passes
//     them: the verifier expects each once, and the report says how many were sent (Verdict.Late).
//   - -mix (default immediate=0.25,within=0.45,beyond=0.15,cross=0.15): relative weights of the
//     duplicate kinds.
//   - -within-max, -beyond-min, -beyond-max (defaults (N−1)·I/2, N·I+I/4, N·I+3I/4): delay
//     ranges.
//   - -field (default header:event-id): where the event id goes: key, value, header:NAME, json:PATH
//     (= the worker's DEDUP_KEY).
//   - -scope, -window-count, -window-interval, -fpr (defaults partition, 3, 1s, 1e-6): the worker's
//     DEDUP_SCOPE, DEDUP_WINDOW_COUNT, DEDUP_WINDOW_INTERVAL, DEDUP_FALSE_POSITIVE_RATE.
//   - -capacity (default: sized from -rate, or -count, per filter): embedded:
//     DEDUP_WINDOW_CAPACITY.
//   - -seed, -run-id (defaults 1, from the seed and the clock): the plan is a pure function of the
//     seed; the run id tags records and salts the ids.
//   - -json FILE, -html FILE: machine-readable report; self-contained HTML report (inline SVG
//     charts, no scripts, nothing loaded).
//   - -passthrough: embedded: a plain fetch→produce copy instead of the worker, every record
//     expected once (the baseline).
//   - -preload: embedded: send everything first, then start the worker (or the copy) and measure
//     how fast it drains the input.
//   - -restart-at F: embedded: restart the worker gracefully after a fraction F of the records
//     (with -worker-env CHECKPOINT_DIR=…).
//   - -oversize N, -oversize-bytes, -dead-letter-topic (defaults 0, 2 MiB, $KAFKA_DEAD_LETTER_TOPIC
//     in the external mode): records the output refuses (see Oversized records).
//   - -audit-topic (default $KAFKA_DUPLICATES_TOPIC in the external mode): the worker's audit
//     topic (see The audit topic).
//   - -sizing: print memory per key against theory for FPR 1e-2…1e-9 and exit.
//   - -settle, -timeout, -quiet, -v (defaults 5s, none): stop waiting after this much silence;
//     bound the run; no progress; worker logs.
//
// kdedup loadtest -h lists the others: the topics and partitions, a second worker joining and
// leaving (-join-at, -leave-at), a rebuild from the output topic (-rebuild-at), produce faults
// injected into the embedded broker (-fault-at) and the mark header of an external worker.
//
// # Event identity
//
// Every generated record carries a unique event id (16 hex digits) in the deduplication field
// (the Kafka key, the whole value, a header or a JSON path) and three headers: lt-run (the run id,
// so that records of other runs in the same topics are ignored), lt-seq (the send sequence number,
// increasing in send order on every partition) and lt-sent (the Unix time in nanoseconds at which
// the record was created). A duplicate re-sends the event id of an earlier original:
//
//   - immediate: right after the original, on the same partition: must be dropped;
//   - within: less than (N−1)·interval later on the same partition: must be dropped;
//   - beyond: more than N·interval later on the same partition: must pass again;
//   - cross: within the window but on another partition: dropped only under scope global.
//
// At the end one unkeyed marker per input partition tells the verifier that everything before it
// was processed (the worker logs one sampled "record without an extractable deduplication key"
// warning for them; with DEDUP_UNKEYED_POLICY=drop the verifier falls back to -settle).
//
// The generator keeps a send log (sequence number → event, kind, partition, creation time). The
// verifier combines it with what it read from the output to decide, per event, what must have
// happened. Because the window rotates on the worker's clock, which the verifier cannot see, each
// judgement uses sound bounds on the worker's processing time (never before a record was created,
// never after it, or a later record of the same input partition, was seen in the output); a copy
// whose fate these bounds cannot decide is counted as ambiguous ("not judged"), never as a failure.
//
// # Oversized records
//
// -oversize N (Config.Oversize) sends N oversized records: unique events without duplicates whose
// value has -oversize-bytes (default 2 MiB), the i-th on input partition i mod the partition
// count, after a share (i+1)/(N+1) of the records. The input topic must take them: the embedded
// mode raises its max.message.bytes to 16 MiB and leaves the output topic at the 1 MiB default, so
// the output refuses them. The verifier then finds, for each: delivered (an output topic that
// takes it); refused while its partition went on, which passes only when the worker wrote it to
// its dead-letter topic (-dead-letter-topic names it; the embedded mode creates it and sets the
// worker's KAFKA_DEAD_LETTER_TOPIC) with the worker's headers; or blocked, when neither it nor
// anything after it on its partition appeared. A block is what the worker does without a
// dead-letter topic: everything before the record is judged as usual, the records behind it are
// reported as held and not judged, and the run settles (-settle) without the partition's end
// marker.
//
// # The audit topic
//
// With -audit-topic (Config.AuditTopic; the embedded mode creates it with the input's partition
// count and sets the worker's KAFKA_DUPLICATES_TOPIC) the verifier reads the audit topic after the
// run (Verdict.Audit) and accounts for every record sent: in the output or in the audit topic,
// never in neither (a record lost for good) and, outside mark mode, never in both; every lost
// unique event (a false positive of the filter) must be there, and every audit record must name
// the record's input partition and an offset in its kdedup-source-* headers. Repeated audit
// records are counted, not failed: after a crash under at-least-once the worker rewrites what
// followed its last commit.
//
// # Determinism
//
// The plan (which records are originals, how many duplicates each gets, of which kind, with which
// delay, on which entity and partition) is drawn from a PRNG seeded with Config.Seed, one original
// at a time, so it does not depend on timing. Event ids are salted with Config.RunID so that runs
// against a long-lived worker do not collide. With a fixed rate the send order follows the plan's
// schedule; with rate 0 (as fast as possible) a delayed duplicate is sent at the first opportunity
// after its due time, so the interleaving depends on how fast the brokers accept records.
//
// # The report
//
//   - leaked: a copy that had to be dropped appeared, or a record appeared twice (at-least-once
//     redelivery counts too);
//   - lost: a unique event (an original, a cross copy under scope partition, a beyond copy) never
//     appeared. Expected losses are uniques × FPR; the run fails when losses exceed the Poisson
//     upper bound at 99.9 % (a single loss fails a small run at FPR 1e-6). "Once the window had
//     filled" gives the loss rate of events sent after N·interval, which is what the configured
//     FPR describes;
//   - order violations: per Kafka key and input partition, lt-seq must increase in the output;
//   - not judged: copies whose fate the bounds above cannot decide (the worker lagged close to a
//     window edge);
//   - latency percentiles (creation → read from the output), split at the broker's acknowledgement
//     of the generator's produce request ("latency split": the loadtest's own sending, then the
//     pipeline and the verifier's read), throughput, a time series.
//
// Exit status: 0 when the run passed; 1 on leaks, losses above the bound, order violations, an
// incomplete run or a runtime error; 2 on bad flags. A live progress line (rewritten in place on a
// terminal, one line every 2 s otherwise) shows rate and ETA.
//
// # Tests
//
// go test ./loadtest/ unit-tests the verifier on synthetic outputs (one leaked duplicate, one lost
// event and one order swap are each caught; lag makes copies "not judged", not failures), the
// plan's determinism and the id placement (checked with the worker's own key extraction), and runs
// three end-to-end pipelines over a real (kfake) broker: a copy, an exact deduplicator, and a
// faulty one whose injected leaks and loss are counted exactly.
//
//	go test ./loadtest/
//	go test ./internal/loadrun/ -run Loadtest
//
// The second runs the subcommand with the real worker (header/partition with all duplicate kinds,
// key/global, json/pass-through, a restart with checkpoints) and against a broker without a worker
// (exit 1). The HTML report is parsed strictly (every <svg> must draw a data series, nothing
// external); loadtest/ci-render.sh installs Chromium and checks a headless screenshot of it:
//
//	bash loadtest/ci-render.sh
//	source loadtest/ci-render.sh && loadtest_render_check
package loadtest
