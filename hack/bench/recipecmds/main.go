// Command recipecmds times `recipe show` and `recipe list` on the bundled corpus as whole
// processes, the way a user meets them, interleaved over 21 runs each after a warm-up, beside
// `recipe --help` (the floor of any inferplane process on the machine: start-up, no recipe
// read) (make bench-recipes). It prints min, median and max wall time, the ratio of each
// median to the floor's, and the machine's load; it asserts nothing.
package main

import (
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

func main() {
	repo := flag.String("repo", "../..", "the inferplane checkout (its cmd/inferplane, recipes/ and tenants/)")
	flag.Parse()
	dir, err := os.MkdirTemp("", "recipecmds-")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, "inferplane")
	build := exec.Command("go", "build", "-o", bin, "./cmd/inferplane")
	build.Dir = *repo
	if out, err := build.CombinedOutput(); err != nil {
		log.Fatalf("go build: %v\n%s", err, out)
	}
	recipes, tenants := filepath.Join(*repo, "recipes"), filepath.Join(*repo, "tenants")
	cmds := []struct {
		name string
		args []string
	}{
		{"floor: recipe --help", []string{"recipe", "--help"}},
		{"recipe show Qwen/Qwen3-32B --node-type h100", []string{"recipe", "show", "Qwen/Qwen3-32B", "--node-type", "h100", "--recipes", recipes, "--tenants", tenants}},
		{"recipe show moonshotai/Kimi-K3 --strategy multi_node_tp_dp --node-type gb200", []string{"recipe", "show", "moonshotai/Kimi-K3", "--strategy", "multi_node_tp_dp", "--node-type", "gb200", "--recipes", recipes, "--tenants", tenants}},
		{"recipe list", []string{"recipe", "list", "--recipes", recipes}},
	}
	const runs = 21
	times := make([][]time.Duration, len(cmds))
	for i := -1; i < runs; i++ {
		for c, cmd := range cmds {
			x := exec.Command(bin, cmd.args...)
			start := time.Now()
			if out, err := x.CombinedOutput(); err != nil {
				log.Fatalf("%s: %v\n%s", cmd.name, err, out)
			}
			if i >= 0 { // the first round warms the page cache up
				times[c] = append(times[c], time.Since(start))
			}
		}
	}
	median := func(d []time.Duration) time.Duration { s := slices.Clone(d); slices.Sort(s); return s[len(s)/2] }
	floor := median(times[0])
	for c, cmd := range cmds {
		fmt.Printf("%-80s median %6.1f ms  min %6.1f  max %6.1f  (%.1fx the floor)\n", cmd.name,
			ms(median(times[c])), ms(slices.Min(times[c])), ms(slices.Max(times[c])), float64(median(times[c]))/float64(floor))
	}
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("whole processes, %d runs each, interleaved; machine load (1/5/15 min): %s\n", runs, strings.Join(strings.Fields(string(load))[:3], " "))
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
