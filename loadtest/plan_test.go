package loadtest

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kdedup/kdedup/identity"
	"github.com/kdedup/kdedup/internal/kafkaio"
)

func testConfig() Config {
	return Config{
		Conn: kafkaio.Conn{Brokers: []string{"127.0.0.1:1"}}, InputTopic: "in", OutputTopic: "out",
		Count: 20000, Entities: 500, DupRatio: 0.3,
		Mix:         Mix{Immediate: 1, Within: 2, Beyond: 1, Cross: 1},
		Field:       Field{Kind: FieldHeader, Name: "event-id"},
		WindowCount: 3, WindowInterval: time.Second, FalsePositiveRate: 1e-6,
		Seed: 42, RunID: "test-run",
	}.withDefaults()
}

func drawPlan(cfg Config, partitions int) []planned {
	p := newPlanner(cfg, partitions)
	var out []planned
	for {
		o, ok := p.nextOriginal()
		if !ok {
			return out
		}
		out = append(out, o)
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	cfg := testConfig()
	a, b := drawPlan(cfg, 4), drawPlan(cfg, 4)
	if !reflect.DeepEqual(a, b) {
		t.Fatal("two plans with the same seed differ")
	}
	cfg.Seed++
	if reflect.DeepEqual(a, drawPlan(cfg, 4)) {
		t.Fatal("plans with different seeds are equal")
	}
}

func TestPlanProperties(t *testing.T) {
	for _, field := range []Field{{Kind: FieldHeader, Name: "event-id"}, {Kind: FieldKey}} {
		t.Run(field.String(), func(t *testing.T) {
			cfg := testConfig()
			cfg.Field = field
			plan := drawPlan(cfg, 4)
			pl := newPlanner(cfg, 4)
			records, kinds := 0, map[Kind]int{}
			for i, o := range plan {
				if o.ord != uint32(i) {
					t.Fatalf("original %d has ordinal %d", i, o.ord)
				}
				records += 1 + len(o.dups)
				if field.Kind == FieldKey {
					if got := pl.partitionOf(pl.ids.key(nil, o.ord, cfg.KeySize)); got != o.part {
						t.Fatalf("event %d on partition %d, murmur2 of its key says %d", o.ord, o.part, got)
					}
				} else if got := pl.partitionOf(entityKey(nil, o.entity, cfg.KeySize)); got != o.part {
					t.Fatalf("entity %d on partition %d, murmur2 of its key says %d", o.entity, o.part, got)
				}
				var beyond, cross int
				for _, d := range o.dups {
					kinds[d.kind]++
					switch d.kind {
					case KindImmediate:
						if d.delay != 0 || d.part != o.part || d.entity != o.entity {
							t.Fatalf("immediate duplicate %+v of %+v", d, o)
						}
					case KindWithin:
						if d.delay < 0 || d.delay > cfg.WithinMax || d.part != o.part || d.entity != o.entity {
							t.Fatalf("within duplicate %+v of %+v", d, o)
						}
					case KindBeyond:
						beyond++
						if d.delay < cfg.BeyondMin || d.delay > cfg.BeyondMax || d.part != o.part {
							t.Fatalf("beyond duplicate %+v of %+v", d, o)
						}
						if d.delay <= time.Duration(cfg.WindowCount)*cfg.WindowInterval {
							t.Fatalf("beyond delay %v inside the window", d.delay)
						}
					case KindCross:
						cross++
						if d.part == o.part || d.delay > cfg.WithinMax {
							t.Fatalf("cross duplicate %+v of %+v", d, o)
						}
						if field.Kind == FieldKey && d.entity != o.entity {
							t.Fatalf("cross duplicate under key field changed the key: %+v", d)
						}
					default:
						t.Fatalf("duplicate of kind %v", d.kind)
					}
				}
				if beyond > 1 || cross > 1 {
					t.Fatalf("event %d has %d beyond and %d cross duplicates", o.ord, beyond, cross)
				}
			}
			if records != cfg.Count {
				t.Fatalf("plan has %d records, want %d", records, cfg.Count)
			}
			dups := records - len(plan)
			if ratio := float64(dups) / float64(records); math.Abs(ratio-cfg.DupRatio) > 0.02 {
				t.Errorf("duplicate ratio %.3f, want about %.3f", ratio, cfg.DupRatio)
			}
			// Mix 1:2:1:1 → each weight-1 kind about a fifth of the duplicates.
			for k, want := range map[Kind]float64{KindImmediate: 0.2, KindWithin: 0.4, KindBeyond: 0.2, KindCross: 0.2} {
				if got := float64(kinds[k]) / float64(dups); math.Abs(got-want) > 0.03 {
					t.Errorf("%v: %.3f of the duplicates, want about %.2f", k, got, want)
				}
			}
		})
	}
}

func TestPlanHighDuplicateRatio(t *testing.T) {
	cfg := testConfig()
	cfg.DupRatio = 0.8 // four duplicates per original: at most one beyond and one cross each
	plan := drawPlan(cfg, 4)
	records := 0
	for _, o := range plan {
		records += 1 + len(o.dups)
	}
	if ratio := float64(records-len(plan)) / float64(records); math.Abs(ratio-0.8) > 0.02 || records != cfg.Count {
		t.Errorf("%d records with duplicate ratio %.3f, want %d and about 0.8", records, ratio, cfg.Count)
	}
}

// TestLateRecords checks the -late option: a share Late of the records are late originals,
// spread evenly, without duplicates, stamped LateAge before their creation (every other record at
// its creation); the duplicates stay a share DupRatio; the verifier expects each late record once
// and counts them in Verdict.Late.
func TestLateRecords(t *testing.T) {
	tests := []struct {
		name  string
		late  float64
		dups  float64
		field Field
	}{
		{"none", 0, 0.3, Field{Kind: FieldHeader, Name: "event-id"}},
		{"one percent", 0.01, 0.25, Field{Kind: FieldHeader, Name: "event-id"}},
		{"one percent, no duplicates", 0.01, 0, Field{Kind: FieldHeader, Name: "event-id"}},
		{"ten percent, key field", 0.1, 0.3, Field{Kind: FieldKey}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Late, cfg.DupRatio, cfg.Field = tt.late, tt.dups, tt.field
			if err := cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			plan := drawPlan(cfg, 4)
			records, late, lastLate, maxGap := 0, 0, 0, 0
			for _, o := range plan {
				records += 1 + len(o.dups)
				if !o.late {
					continue
				}
				late++
				if len(o.dups) > 0 {
					t.Fatalf("late event %d has %d duplicates", o.ord, len(o.dups))
				}
				maxGap, lastLate = max(maxGap, records-lastLate), records
			}
			want := int(tt.late * float64(cfg.Count))
			if records != cfg.Count || late < want-1 || late > want {
				t.Fatalf("%d records, %d late; want %d and %d (or one less)", records, late, cfg.Count, want)
			}
			if late > 0 && float64(maxGap) > 1/tt.late+10 { // an original's duplicates may come between
				t.Errorf("late records up to %d records apart, want about %.0f", maxGap, 1/tt.late)
			}
			if ratio := float64(records-len(plan)) / float64(records); math.Abs(ratio-tt.dups) > 0.02 {
				t.Errorf("duplicate ratio %.3f, want about %.3f", ratio, tt.dups)
			}
			checkLateRecords(t, cfg, plan, late)
		})
	}
}

// checkLateRecords builds the originals of plan as the generator sends them, one per
// millisecond, checks their Kafka timestamps and lt-sent headers, and verifies an output that
// delivered each once: nothing lost, late of them counted late.
func checkLateRecords(t *testing.T, cfg Config, plan []planned, late int) {
	t.Helper()
	start := time.Unix(1700000000, 0)
	g := newGenerator(cfg, nil, 4, start)
	var sent []sentRec
	out := make([][]Obs, 4)
	for i, o := range plan {
		s := sentRec{at: int64(i) * int64(time.Millisecond), ord: o.ord, entity: o.entity, part: o.part, kind: KindOriginal, late: o.late}
		r := g.buildRecord(len(sent), s)
		created := start.Add(time.Duration(s.at))
		wantTime := created
		if o.late {
			wantTime = created.Add(-LateAge)
		}
		if !r.Time.Equal(wantTime) || string(r.Headers[2].Value) != strconv.FormatInt(created.UnixNano(), 10) {
			t.Fatalf("event %d (late %v): timestamp %v, lt-sent %s; want %v and %d", o.ord, o.late, r.Time, r.Headers[2].Value, wantTime, created.UnixNano())
		}
		out[o.part] = append(out[o.part], Obs{Seq: int64(len(sent)), At: s.at + int64(time.Millisecond)})
		sent = append(sent, s)
	}
	end := int64(len(plan)+1) * int64(time.Millisecond)
	for p := range out {
		out[p] = append(out[p], Obs{Seq: int64(len(sent)), At: end})
		sent = append(sent, sentRec{at: end, part: int32(p), kind: KindMarker})
	}
	v := verify(verifyInput{sent: sent, obs: out, end: end + 1, expect: window3x1s(false)}).verdict
	if v.Late != late || v.Lost != 0 || v.Uniques != len(plan) {
		t.Errorf("verdict: %d late, %d lost, %d uniques; want %d, 0, %d", v.Late, v.Lost, v.Uniques, late, len(plan))
	}
}

func TestIDsAreUnique(t *testing.T) {
	a, b := newIDMaker("run-a"), newIDMaker("run-b")
	seen := map[string]bool{}
	for ord := range uint32(100000) {
		id := string(a.id(nil, ord))
		if len(id) != 16 || seen[id] {
			t.Fatalf("id %q of ordinal %d: bad length or repeated", id, ord)
		}
		seen[id] = true
	}
	for ord := range uint32(1000) {
		if seen[string(b.id(nil, ord))] {
			t.Fatalf("run b's id of ordinal %d collides with run a", ord)
		}
	}
}

// headerIter adapts kafka headers to the KeyFunc header iterator.
func headerIter(hs []kafkaio.Header) func(func(string, []byte) bool) {
	return func(yield func(string, []byte) bool) {
		for _, h := range hs {
			if !yield(h.Key, h.Value) {
				return
			}
		}
	}
}

// TestRecordsCarryTheIdentity checks, with the worker's own key extraction, that the generator
// writes the event id where the field says and that end markers have no identity.
func TestRecordsCarryTheIdentity(t *testing.T) {
	for _, spec := range []string{"key", "value", "header:event-id", "json:meta.id", "json:id"} {
		t.Run(spec, func(t *testing.T) {
			cfg := testConfig()
			f, err := ParseField(spec)
			if err != nil {
				t.Fatal(err)
			}
			cfg.Field, cfg.KeySize, cfg.ValueSize = f, 24, 120
			e, err := identity.New(f, identity.Options{})
			if err != nil {
				t.Fatal(err)
			}
			extract := func(k, v []byte, h identity.Headers) ([]byte, bool) {
				id, absent, err := e.Extract(context.Background(), k, v, h)
				return id, err == nil && absent == identity.Found
			}
			g := newGenerator(cfg, nil, 4, time.Unix(1700000000, 0))
			for seq, s := range []sentRec{
				{at: 1000, ord: 7, entity: 3, part: 1, kind: KindOriginal},
				{at: 2000, ord: 7, entity: 3, part: 1, kind: KindWithin},
				{at: 3000, ord: 123456, entity: 499, part: 2, kind: KindCross},
			} {
				r := g.buildRecord(seq, s)
				id, ok := extract(r.Key, r.Value, headerIter(r.Headers))
				want := g.ids.id(nil, s.ord)
				switch f.Kind {
				case FieldKey: // the whole key is the identity: the id, padded
					want = g.ids.key(nil, s.ord, cfg.KeySize)
				case FieldValue:
					want = append(want, bytes.Repeat([]byte("."), cfg.ValueSize-16)...)
				}
				if !ok || !bytes.Equal(id, want) {
					t.Fatalf("extracted %q (ok %v), want %q", id, ok, want)
				}
				if len(r.Key) != 24 || len(r.Value) != 120 {
					t.Errorf("key %d bytes, value %d bytes; want 24 and 120", len(r.Key), len(r.Value))
				}
				if f.Kind == FieldJSON && !json.Valid(r.Value) {
					t.Errorf("value is not JSON: %s", r.Value)
				}
				hdr := map[string]string{}
				for _, h := range r.Headers {
					hdr[h.Key] = string(h.Value)
				}
				if hdr[HeaderRun] != cfg.RunID || hdr[HeaderSeq] != strconv.Itoa(seq) ||
					hdr[HeaderSent] != strconv.FormatInt(time.Unix(1700000000, 0).UnixNano()+s.at, 10) {
					t.Errorf("headers %v", hdr)
				}
			}
			m := g.buildRecord(9, sentRec{part: 3, kind: KindMarker})
			if _, ok := extract(m.Key, m.Value, headerIter(m.Headers)); ok {
				t.Error("the end marker has an identity")
			}
		})
	}
}

// TestGeneratorSchedule runs the scheduling loop without Kafka: every duplicate is sent no
// earlier than its planned delay after its original, the rate is never exceeded, records reach
// their partition in sequence order, and the end markers come last.
func TestGeneratorSchedule(t *testing.T) {
	tests := []struct {
		name string
		rate float64
	}{
		{"as fast as possible", 0},
		{"fixed rate", 20000},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			cfg.Count, cfg.Rate = 3000, tt.rate
			cfg.WindowInterval = 20 * time.Millisecond
			cfg.WithinMax, cfg.BeyondMin, cfg.BeyondMax = 0, 0, 0
			cfg = cfg.withDefaults()
			const parts = 3
			g := newGenerator(cfg, nil, parts, time.Now())
			var wg sync.WaitGroup
			got := make([][]kafkaio.Record, parts)
			for p := range parts {
				g.chans[p] = make(chan []kafkaio.Record, 1)
				wg.Add(1)
				go func() {
					defer wg.Done()
					for b := range g.chans[p] {
						got[p] = append(got[p], b...)
					}
				}()
			}
			err := g.generate(context.Background())
			for _, ch := range g.chans {
				close(ch)
			}
			wg.Wait()
			if err != nil {
				t.Fatal(err)
			}
			if len(g.log) != cfg.Count+parts {
				t.Fatalf("%d records logged, want %d", len(g.log), cfg.Count+parts)
			}
			// Delays from the plan, which is deterministic.
			plan := drawPlan(cfg, parts)
			origAt := map[uint32]int64{}
			delays := map[uint32]map[Kind][]time.Duration{}
			for _, o := range plan {
				delays[o.ord] = map[Kind][]time.Duration{}
				for _, d := range o.dups {
					delays[o.ord][d.kind] = append(delays[o.ord][d.kind], d.delay)
				}
			}
			for seq, s := range g.log {
				if tt.rate > 0 && s.kind != KindMarker && time.Duration(s.at) < time.Duration(float64(seq)/tt.rate*1e9) {
					t.Fatalf("seq %d created at %v, before its slot", seq, time.Duration(s.at))
				}
				switch s.kind {
				case KindOriginal:
					origAt[s.ord] = s.at
				case KindMarker:
					if seq < cfg.Count {
						t.Fatalf("marker at seq %d before the end", seq)
					}
				default:
					oa, ok := origAt[s.ord]
					if !ok {
						t.Fatalf("duplicate seq %d of event %d sent before its original", seq, s.ord)
					}
					ds := delays[s.ord][s.kind]
					if len(ds) == 0 {
						t.Fatalf("seq %d: event %d has no planned %v duplicate", seq, s.ord, s.kind)
					}
					minDelay := ds[0]
					for _, d := range ds {
						minDelay = min(minDelay, d)
					}
					if time.Duration(s.at-oa) < minDelay {
						t.Fatalf("seq %d (%v of event %d) sent %v after its original, planned delay %v", seq, s.kind, s.ord, time.Duration(s.at-oa), minDelay)
					}
				}
			}
			for p, recs := range got {
				last := int64(-1)
				for i, r := range recs {
					seq, _ := strconv.ParseInt(string(r.Headers[1].Value), 10, 64)
					if seq <= last || g.log[seq].part != int32(p) {
						t.Fatalf("partition %d record %d has seq %d after %d", p, i, seq, last)
					}
					last = seq
				}
				if n := len(recs); n == 0 || string(recs[n-1].Headers[len(recs[n-1].Headers)-1].Key) != HeaderEnd {
					t.Fatalf("partition %d does not end with its marker", p)
				}
			}
		})
	}
}

func TestParseMixAndField(t *testing.T) {
	mixes := []struct {
		in      string
		want    Mix
		wantErr string
	}{
		{"immediate=1,within=2,beyond=0.5,cross=3", Mix{1, 2, 0.5, 3}, ""},
		{" within = 1 ", Mix{Within: 1}, ""},
		{"within=-1", Mix{}, "non-negative"},
		{"later=1", Mix{}, "unknown duplicate kind"},
		{"within", Mix{}, "kind=weight"},
		{"", Mix{}, "empty"},
	}
	for _, tt := range mixes {
		got, err := ParseMix(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) || !strings.HasPrefix(err.Error(), "loadtest: ") {
				t.Errorf("ParseMix(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseMix(%q) = %+v, %v; want %+v", tt.in, got, err, tt.want)
		}
		if back, err := ParseMix(got.String()); err != nil || back != got {
			t.Errorf("ParseMix(%q.String()) = %+v, %v", tt.in, back, err)
		}
	}
	fields := []struct {
		in, wantErr string
	}{
		{"key", ""}, {"value", ""}, {"header:event-id", ""}, {"json:meta.id", ""},
		{"header:", "empty header name"}, {"header:lt-seq", "reserved"}, {"json:a..b", "element 2 of 3 is empty"}, {"key:x", "takes no argument"},
		{"body", "unknown kind"}, {"avro:meta.id", "avro"},
	}
	for _, tt := range fields {
		f, err := ParseField(tt.in)
		if tt.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("ParseField(%q) error %v, want one containing %q", tt.in, err, tt.wantErr)
			}
			continue
		}
		if err != nil || f.String() != tt.in {
			t.Errorf("ParseField(%q) = %v, %v", tt.in, f, err)
		}
	}
}

func noop(context.Context) error { return nil }

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name    string
		mutate  func(*Config)
		wantErr string
	}{
		{"valid", func(*Config) {}, ""},
		{"no brokers", func(c *Config) { c.Brokers = nil }, "no brokers"},
		{"same topics", func(c *Config) { c.OutputTopic = c.InputTopic }, "both"},
		{"no records", func(c *Config) { c.Count = 0 }, "count"},
		{"negative rate", func(c *Config) { c.Rate = -1 }, "rate"},
		{"too many duplicates", func(c *Config) { c.DupRatio = 0.99 }, "duplicate ratio"},
		{"negative late fraction", func(c *Config) { c.Late = -0.1 }, "late fraction"},
		{"late and duplicates above 0.95", func(c *Config) { c.Late = 0.7 }, "late fraction"},
		{"empty mix", func(c *Config) { c.Mix = Mix{Within: 0}; c.Mix.Beyond = -1 }, "mix"},
		{"no window", func(c *Config) { c.WindowCount = 0 }, "window"},
		{"no false-positive rate", func(c *Config) { c.FalsePositiveRate = 0 }, "false-positive rate"},
		{"expect all needs no false-positive rate", func(c *Config) { c.FalsePositiveRate = 0; c.ExpectAll = true }, ""},
		{"cross with one entity", func(c *Config) { c.Entities = 1 }, "2 entities"},
		{"hook without a function", func(c *Config) { c.Hooks = []Hook{{Name: "join", At: 1}} }, `"join" has no function`},
		{"hook past the end", func(c *Config) { c.Hooks = []Hook{{Name: "join", At: c.Count + 1, Do: noop}} }, `hook "join" is outside`},
		{"Do past the end", func(c *Config) { c.At, c.Do = -1, noop }, `hook "hook" is outside`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testConfig()
			tt.mutate(&cfg)
			err := cfg.Validate()
			if tt.wantErr == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Fatalf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}
