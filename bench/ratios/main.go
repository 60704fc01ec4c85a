// Command ratios reads `go test -bench Compare` output (files or standard input) and prints, per
// op, p, key length and parallelism, the median ns/op (and cpu-ns/op) of each implementation
// (windowsw is the window with Config.SingleWriter, measured on TestAndAdd at par=1 only), the
// ratios window/blobloom, windowsw/blobloom and window/bitsbloom, and each implementation's
// speedup from par=1 to par=P. Ratios and speedups are medians of per-round ratios: the i-th
// sample of every cell is taken to come from round i, as run.sh's interleaved rounds produce. A
// ratio below 1 means the window is faster.
//
// Usage:
//
//	go run ./ratios results/*.txt
//	go run ./ratios -metric cpu-ns/op results/compare.txt
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

var lineRE = regexp.MustCompile(`^BenchmarkCompare/op=(\w+)/(p=[^/]+)/key=(\w+)/par=(\d+)/impl=(\w+)(?:-\d+)?\s+\d+\s+(.*)$`)

type row struct{ op, p, key string }

func main() {
	metric := flag.String("metric", "ns/op", "metric to compare: ns/op or cpu-ns/op")
	flag.Parse()
	samples := map[row]map[string]map[int][]float64{} // row → impl → par → values
	var rows []row
	read := func(r io.Reader) {
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			m := lineRE.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			v, ok := value(m[6], *metric)
			if !ok {
				continue
			}
			par, _ := strconv.Atoi(m[4])
			k := row{m[1], m[2], m[3]}
			if samples[k] == nil {
				samples[k] = map[string]map[int][]float64{}
				rows = append(rows, k)
			}
			if samples[k][m[5]] == nil {
				samples[k][m[5]] = map[int][]float64{}
			}
			samples[k][m[5]][par] = append(samples[k][m[5]][par], v)
		}
	}
	if flag.NArg() == 0 {
		read(os.Stdin)
	}
	for _, name := range flag.Args() {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "ratios:", err)
			os.Exit(1)
		}
		read(f)
		f.Close()
	}
	if len(rows) == 0 {
		fmt.Fprintln(os.Stderr, "ratios: no BenchmarkCompare results with", *metric)
		os.Exit(1)
	}
	fmt.Printf("median %s (n = samples per cell); ratio < 1: window faster\n\n", *metric)
	fmt.Printf("| %-14s | %-5s | %-4s | %-3s | %-12s | %-12s | %-12s | %-12s | %-8s | %-8s | %-8s |\n",
		"op", "p", "key", "par", "window", "windowsw", "blobloom", "bitsbloom", "win/blob", "wsw/blob", "win/bits")
	fmt.Println("|----------------|-------|------|-----|--------------|--------------|--------------|--------------|----------|----------|----------|")
	speed := map[string][]string{}
	for _, k := range rows {
		pars := map[int]bool{}
		for _, byPar := range samples[k] {
			for par := range byPar {
				pars[par] = true
			}
		}
		var ps []int
		for par := range pars {
			ps = append(ps, par)
		}
		sort.Ints(ps)
		for _, par := range ps {
			w, nw := med(samples[k]["window"][par])
			ws, ns := med(samples[k]["windowsw"][par])
			bl, nb := med(samples[k]["blobloom"][par])
			bi, ni := med(samples[k]["bitsbloom"][par])
			fmt.Printf("| %-14s | %-5s | %-4s | %-3d | %-12s | %-12s | %-12s | %-12s | %-8s | %-8s | %-8s |\n",
				k.op, strings.TrimPrefix(k.p, "p="), k.key, par, cell(w, nw), cell(ws, ns), cell(bl, nb), cell(bi, ni),
				paired(samples[k]["window"][par], samples[k]["blobloom"][par]),
				paired(samples[k]["windowsw"][par], samples[k]["blobloom"][par]),
				paired(samples[k]["window"][par], samples[k]["bitsbloom"][par]))
		}
		if len(ps) == 2 {
			for _, impl := range []string{"window", "blobloom", "bitsbloom"} {
				if r := paired(samples[k][impl][ps[0]], samples[k][impl][ps[1]]); r != "-" {
					speed[impl] = append(speed[impl], fmt.Sprintf("%s/%s/%s: %s", k.op, strings.TrimPrefix(k.p, "p="), k.key, r))
				}
			}
		}
	}
	if len(speed) > 0 && *metric != "ns/op" {
		fmt.Printf("\n%s at par=1 / %s at par=P (1.00x: no extra CPU per op when parallel; not a speedup):\n", *metric, *metric)
	} else if len(speed) > 0 {
		fmt.Println("\nparallel speedup (par=1 time / par=P time):")
	}
	if len(speed) > 0 {
		for _, impl := range []string{"window", "blobloom", "bitsbloom"} {
			if len(speed[impl]) > 0 {
				fmt.Printf("  %-9s %s\n", impl, strings.Join(speed[impl], ", "))
			}
		}
	}
}

// value finds the number before unit in the fields of a benchmark line.
func value(rest, unit string) (float64, bool) {
	f := strings.Fields(rest)
	for i := 1; i < len(f); i++ {
		if f[i] == unit {
			v, err := strconv.ParseFloat(f[i-1], 64)
			return v, err == nil
		}
	}
	return 0, false
}

func med(v []float64) (float64, int) {
	if len(v) == 0 {
		return 0, 0
	}
	s := append([]float64(nil), v...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2], n
	}
	return (s[n/2-1] + s[n/2]) / 2, n
}

func cell(v float64, n int) string {
	if n == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f (n=%d)", v, n)
}

// paired returns the median of a[i]/b[i]: with interleaved rounds (run.sh) the i-th samples of
// two cells come from the same round, so a burst of load on the shared machine cancels out.
func paired(a, b []float64) string {
	n := min(len(a), len(b))
	if n == 0 {
		return "-"
	}
	r := make([]float64, n)
	for i := range r {
		r[i] = a[i] / b[i]
	}
	m, _ := med(r)
	return fmt.Sprintf("%.2fx", m)
}
