#!/usr/bin/env bash
# run.sh reproduces the filter comparison of bench/README.md and the issue #12 table: it runs the comparison one benchmark
# set at a time (never in parallel with itself) and writes results/*.txt, then the false-positive
# rates and memory (bits per key, ratio to an optimal Bloom filter; window memory for N = 1, 8, 24),
# then prints the ratio tables (window, single-writer window, blobloom, bits-and-blooms).
# Usage: bash run.sh [rounds]   (from the bench/ directory; default 6 rounds)
#        SETS="hash-1e-3" bash run.sh 5   (only the named sets, see sets below; no FPR and memory runs)
#        PROBES=100000000 bash run.sh      (absent keys per filter for the FPR table; default 30M)
set -euo pipefail
cd "$(dirname "$0")"
count=${1:-6}
mkdir -p results
go test -c -o results/bench.test .
run() { # name, -bench regexp, extra flags... (appends one round to results/name.txt)
	local name=$1 re=$2
	shift 2
	echo "== $name" >&2
	./results/bench.test -test.run '^$' -test.bench "$re" -test.benchtime=400000x -test.count=1 "$@" | tee -a "results/$name.txt" | grep -E '^Benchmark' >&2 || true
}
sets=(
	"hash-1e-3 Compare/op=(TestHitHash|TestMissHash|TestAndAddHash)/p=1e-03/"
	"key16-1e-3 Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-03/key=16/"
	"hash-1e-6 Compare/op=(TestHitHash|TestMissHash|TestAndAddHash)/p=1e-06/"
	"key16-1e-6 Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-06/key=16/"
	"key64 Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-0[36]/key=64/"
)
if [[ -n ${SETS:-} ]]; then # e.g. SETS="hash-1e-3 hash-1e-6": only those
	keep=()
	for set in "${sets[@]}"; do
		[[ " $SETS " == *" ${set%% *} "* ]] && keep+=("$set")
	done
	sets=("${keep[@]}")
fi
for set in "${sets[@]}"; do
	rm -f "results/${set%% *}.txt"
done
# Interleaved: each round runs every set once, so that a burst of load on the shared machine
# hits all implementations of a round alike; the ratio tables take medians over the rounds.
for round in $(seq "$count"); do
	echo "=== round $round of $count" >&2
	for set in "${sets[@]}"; do
		run ${set%% *} "${set#* }"
	done
done
if [[ -z ${SETS:-} ]]; then
	./results/bench.test -test.run TestFPR -test.v -probes="${PROBES:-30000000}" | tee results/fpr.txt
	(cd .. && go test ./window -run TestMemoryReport -v) | tee results/memory.txt
fi
go run ./ratios results/hash-*.txt results/key*.txt | tee results/ratios-ns.txt
go run ./ratios -metric cpu-ns/op results/hash-*.txt results/key*.txt | tee results/ratios-cpu.txt
