package main

import (
	"context"
	"fmt"
	"strings"
	"time"
)

// Records the output refuses (larger than its max.message.bytes, or invalid for it). Every loadtest's output topic keeps the embedded
// broker's default max.message.bytes (1MiB) while its input takes 16MiB, so an oversized record
// (-oversize, 2MiB) is refused on its own:
//
//   - in the healthy phase one goes to the dead-letter topic (deadLetterArgs): the refused-records
//     panel counts it, and KdedupDeadLettered must fire (and then keeps firing for the rest of the
//     run: see lingering);
//   - the refused phase, between the handover and degraded phases, sends one without a dead-letter
//     topic: input partition 0 blocks at it halfway through, kdedup_partition_blocked shows it and
//     KdedupPartitionBlocked must fire, and no other alert. The block ends with the phase's worker.

// refusedPhase is the name of the phase whose partition 0 blocks at a refused record.
const refusedPhase = "refused"

// refusedPanel is the dashboard panel of refused records: A blocked partitions, B dead letters.
const refusedPanel = "Refused records: blocked partitions and dead letters"

// deadLetterArgs are the loadtest flags of the healthy phase's dead letter; refusedArgs those of
// the refused phase's block.
var (
	deadLetterArgs = []string{"-oversize", "1", "-dead-letter-topic", "loadtest-dlq"}
	refusedArgs    = []string{"-oversize", "1"}
)

// deadLetterAlert fires on any record written to the dead-letter topic in the last hour.
const deadLetterAlert = "KdedupDeadLettered"

// lingering are alerts that the healthy phase must fire and that then keep firing for the rest
// of the run, with the reason: every later phase ignores them.
var lingering = map[string]string{
	deadLetterAlert:     "the healthy phase's dead letter stays in the rule's increase over [1h] for the rest of the run",
	"KdedupColdRestore": "the healthy phase's first worker starts on an empty checkpoint store (a cold restore, as every first start is), and the rule's increase over [1h] keeps it for the rest of the run; the handover phase's rebuild is another",
}

// checkDeadLetterAlert checks that KdedupDeadLettered fired while run (the healthy phase, whose
// oversized record goes to the dead-letter topic halfway) ran.
func checkDeadLetterAlert(ctx context.Context, api promAPI, run *phaseRun) check {
	c := check{name: "alert " + deadLetterAlert, phase: run.name, want: "firing", got: "never fired"}
	fired, err := firstFiring(ctx, api, "firing", run.began, run.ended.Add(2*scrapeInterval))
	if err != nil {
		c.got = "ALERTS: " + err.Error()
		return c
	}
	if t, ok := fired[deadLetterAlert]; ok {
		c.got, c.ok = "firing", true
		c.detail = fmt.Sprintf("%.1fs after the oversized record was sent", t.Sub(run.start.Add(run.duration/2)).Seconds())
	}
	return c
}

// checkRefusedAlerts checks that KdedupPartitionBlocked fired while run (the refused phase) ran,
// and no other alert, from silentFrom on (before it, the worker of the phase was not scraped yet).
func checkRefusedAlerts(ctx context.Context, api promAPI, run *phaseRun) []check {
	const alert = "KdedupPartitionBlocked"
	from, err := silentFrom(ctx, api, run)
	var fired map[string]time.Time
	if err == nil {
		fired, err = firstFiring(ctx, api, "firing", from, run.ended.Add(2*scrapeInterval))
	}
	if err != nil {
		return []check{{name: "alerts", phase: run.name, got: "ALERTS: " + err.Error()}}
	}
	c := check{name: "alert " + alert, phase: run.name, want: "firing", got: "never fired"}
	half := run.start.Add(run.duration / 2) // the oversized record is sent halfway
	if t, ok := fired[alert]; ok {
		c.got, c.ok = "firing", true
		c.detail = fmt.Sprintf("%.1fs after the oversized record was sent", t.Sub(half).Seconds())
	}
	delete(fired, alert)
	for name := range lingering {
		delete(fired, name)
	}
	for name, t := range fired {
		// The window ends two scrapes after the phase: an alert the degraded phase may fire
		// (mayFire, such as KdedupRestarting for its new process) can start in it.
		if _, ok := mayFire[name]; ok && t.After(run.ended) {
			delete(fired, name)
		}
	}
	other := check{name: "no other alert fires", phase: run.name, want: "only " + alert, got: "none", ok: true}
	if len(fired) > 0 {
		other.got, other.ok = "firing: "+strings.Join(sortedKeys(fired), ", "), false
	}
	return []check{c, other}
}
