// Command ratio reads `go test -bench` output on stdin, copies it to stdout, and then prints,
// for each pair OURS=BASELINE given as an argument (benchmark names without the Benchmark
// prefix and the -N suffix), how many times faster ours is than the baseline it is measured
// against, in one run: what `make bench` prints after each set of benchmarks.
package main

import (
	"bufio"
	"fmt"
	"log"
	"os"
	"strconv"
	"strings"
)

func main() {
	nsPerOp := map[string]float64{}
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		line := sc.Text()
		fmt.Println(line)
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") || f[3] != "ns/op" {
			continue
		}
		name, _, _ := strings.Cut(strings.TrimPrefix(f[0], "Benchmark"), "-")
		if v, err := strconv.ParseFloat(f[2], 64); err == nil {
			nsPerOp[name] = v
		}
	}
	if err := sc.Err(); err != nil {
		log.Fatal(err)
	}
	for _, pair := range os.Args[1:] {
		ours, baseline, ok := strings.Cut(pair, "=")
		o, b := nsPerOp[ours], nsPerOp[baseline]
		if !ok || o == 0 || b == 0 {
			log.Fatalf("%s: want OURS=BASELINE, both among the benchmarks run", pair)
		}
		fmt.Printf("ratio %s / %s: %.1fx (%s %s/op, %s %s/op)\n", baseline, ours, b/o, ours, dur(o), baseline, dur(b))
	}
}

func dur(ns float64) string { return strconv.FormatFloat(ns/1e6, 'f', 3, 64) + "ms" }
