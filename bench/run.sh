#!/usr/bin/env bash
# run.sh reproduces bench/README.md: it runs the comparison one benchmark set at a time (never in
# parallel with itself) and writes results/*.txt, then prints the ratio tables.
# Usage: bash run.sh [count]   (from the bench/ directory; default count 6)
set -euo pipefail
cd "$(dirname "$0")"
count=${1:-6}
mkdir -p results
go test -c -o results/bench.test .
run() { # name, -bench regexp, extra flags...
	local name=$1 re=$2
	shift 2
	echo "== $name" >&2
	./results/bench.test -test.run '^$' -test.bench "$re" -test.benchtime=400000x -test.count="$count" "$@" | tee "results/$name.txt" | grep -E '^Benchmark' >&2 || true
}
run hash-1e-3 'Compare/op=(TestHitHash|TestMissHash|TestAndAddHash)/p=1e-03/'
run key16-1e-3 'Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-03/key=16/'
run hash-1e-6 'Compare/op=(TestHitHash|TestMissHash|TestAndAddHash)/p=1e-06/'
run key16-1e-6 'Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-06/key=16/'
run key64 'Compare/op=(TestHit|TestMiss|TestAndAdd)/p=1e-0[36]/key=64/'
./results/bench.test -test.run TestFPR -test.v -probes="${PROBES:-30000000}" | tee results/fpr.txt
go run ./ratios results/hash-*.txt results/key*.txt | tee results/ratios-ns.txt
go run ./ratios -metric cpu-ns/op results/hash-*.txt results/key*.txt | tee results/ratios-cpu.txt
