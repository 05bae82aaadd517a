package recipe_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// upstreamSynthesisSHA256 is the sha256 of src/lib/command-synthesis.js at
// github.com/vllm-project/recipes 8959cf6, the commit the bundled corpus comes from.
const upstreamSynthesisSHA256 = "3b54c1c80d7cccd71407841146b6e3629fc42f1784d96ab1aa0a30fed8c17826"

// jsYAMLVersion is the js-yaml upstream's site locks (pnpm-lock.yaml at 8959cf6).
const jsYAMLVersion = "4.1.1"

// oracleRequest is one call of upstream's resolveCommand (testdata/oracle/oracle.mjs).
type oracleRequest struct {
	File      string            `json:"file"`
	Variant   string            `json:"variant"`
	Strategy  string            `json:"strategy"`
	Hardware  string            `json:"hardware"`
	Nodes     int32             `json:"nodes"`
	Features  []string          `json:"features"` // null: upstream's defaults
	Modes     map[string]string `json:"modes,omitempty"`
	KVOffload string            `json:"kvOffload,omitempty"`
}

type oracleResult struct {
	Error       string      `json:"error"`
	DeployType  string      `json:"deployType"`
	Argv        []string    `json:"argv"`
	WorkerArgvs [][]string  `json:"workerArgvs"`
	Env         [][2]string `json:"env"`
	Image       string      `json:"image"`
}

// TestUpstreamOracle derives every combination upstream offers (and a set of feature, mode
// and KV-offload requests) and compares each master with the command upstream's own code
// synthesises for the same request: the model, the args in order (minus the per-node
// launcher flags, which the renderer adds), the env in order, the image; for multi-node
// replicas, the per-node flags of every rank. It needs node on PATH, js-yaml (installed from
// the npm registry into the cache) and upstream's src/lib/command-synthesis.js, which no
// registry this machine reaches serves: point INFERPLANE_RECIPES_UPSTREAM at a checkout of
// github.com/vllm-project/recipes at 8959cf6 (or its src/lib folder).
func TestUpstreamOracle(t *testing.T) {
	node, synthesis, yamlDir := oracleTools(t)
	b := bundled(t)
	type job struct {
		req    oracleRequest
		master *v1alpha1.ModelMaster
	}
	var jobs []job
	add := func(req recipe.Request, file string) {
		m, err := b.Derive(req)
		if err != nil {
			return // refusals are the conformance test's
		}
		var features []string
		if req.Features != nil || req.FeatureModes != nil {
			features = append([]string{}, recipe.FeatureOrder(b, req)...)
		}
		jobs = append(jobs, job{oracleRequest{
			File: file, Variant: m.Spec.Variant, Strategy: m.Spec.Source.Strategy, Hardware: req.Hardware.Profile,
			Nodes: m.Spec.Source.Nodes, Features: features, Modes: m.Spec.Source.FeatureModes, KVOffload: req.KVOffload,
		}, m})
	}
	for _, id := range b.Models() {
		r, _, _ := b.Model(id)
		for _, o := range b.Offers(id) {
			base := recipe.Request{ModelID: id, Variant: o.Variant, Strategy: o.Strategy, Hardware: hw(o.Hardware)}
			add(base, r.File)
			for _, extra := range oracleVariations(b, r, o) {
				add(extra(base), r.File)
			}
		}
	}
	require.NotEmpty(t, jobs)

	reqs := make([]oracleRequest, len(jobs))
	for i, j := range jobs {
		reqs[i] = j.req
	}
	in, err := json.Marshal(reqs)
	require.NoError(t, err)
	cmd := exec.Command(node, filepath.Join("testdata", "oracle", "oracle.mjs"), synthesis, yamlDir, bundledDir)
	cmd.Stdin = bytes.NewReader(in)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	require.NoError(t, err, "node: %s", stderr.String())
	var results []oracleResult
	require.NoError(t, json.Unmarshal(out, &results))
	require.Len(t, results, len(jobs))

	mismatches := 0
	for i, j := range jobs {
		if diff := compareOracle(j.master, results[i]); diff != "" {
			mismatches++
			if mismatches <= 40 {
				t.Errorf("%s %s/%s/%s x%d features=%v modes=%v kv=%q:\n%s", j.req.File, j.req.Variant, j.req.Hardware, j.req.Strategy,
					j.req.Nodes, j.req.Features, j.req.Modes, j.req.KVOffload, diff)
			}
		}
	}
	t.Logf("compared %d derived masters with upstream's command synthesis: %d differ", len(jobs), mismatches)
}

// oracleVariations are requests beyond the defaults: each opt-in feature turned on, each mode
// of each pick-one feature, each KV offload option; those that derive are compared too.
func oracleVariations(b *recipe.Book, r *recipe.Recipe, o recipe.Offer) []func(recipe.Request) recipe.Request {
	var out []func(recipe.Request) recipe.Request
	for _, f := range r.OptInFeatures {
		out = append(out, func(q recipe.Request) recipe.Request { q.Features = map[string]bool{f: true}; return q })
	}
	for _, f := range r.Features.Keys {
		out = append(out, func(q recipe.Request) recipe.Request { q.Features = map[string]bool{f: false}; return q })
		for _, m := range r.Features.Values[f].Modes.Keys {
			out = append(out, func(q recipe.Request) recipe.Request { q.FeatureModes = map[string]string{f: m}; return q })
		}
	}
	if o.Variant == r.Variants.Keys[0] {
		for _, k := range b.Taxonomy().KVOffload.Keys {
			out = append(out, func(q recipe.Request) recipe.Request { q.KVOffload = k; return q })
		}
	}
	return out
}

// launcherFlags are the per-node flags upstream puts in each node's command, and whether
// each takes a value.
var launcherFlags = map[string]bool{
	"--nnodes": true, "--node-rank": true, "--master-addr": true, "--headless": false,
	"--data-parallel-address": true, "--data-parallel-start-rank": true,
}

// splitLauncher removes the per-node launcher flags from argv and returns them by name.
func splitLauncher(argv []string) (rest []string, flags map[string]string) {
	flags = map[string]string{}
	for i := 0; i < len(argv); i++ {
		takes, ok := launcherFlags[argv[i]]
		if !ok {
			rest = append(rest, argv[i])
			continue
		}
		if takes && i+1 < len(argv) {
			flags[argv[i]] = argv[i+1]
			i++
		} else {
			flags[argv[i]] = ""
		}
	}
	return rest, flags
}

func compareOracle(m *v1alpha1.ModelMaster, got oracleResult) string {
	if got.Error != "" {
		return "upstream failed: " + got.Error
	}
	var diffs []string
	if len(got.Argv) < 3 || got.Argv[0] != "vllm" || got.Argv[1] != "serve" {
		return fmt.Sprintf("upstream argv %q is not a vllm serve command", got.Argv)
	}
	if got.Argv[2] != m.Spec.Model {
		diffs = append(diffs, fmt.Sprintf("model: ours %s, upstream %s", m.Spec.Model, got.Argv[2]))
	}
	args, head := splitLauncher(got.Argv[3:])
	if !sameArgs(args, m.Spec.Args) {
		diffs = append(diffs, fmt.Sprintf("args:\n  ours     %q\n  upstream %q", m.Spec.Args, args))
	}
	var env [][2]string
	for _, e := range m.Spec.Env {
		env = append(env, [2]string{e.Name, e.Value})
	}
	if !slices.Equal(env, got.Env) {
		diffs = append(diffs, fmt.Sprintf("env:\n  ours     %q\n  upstream %q", env, got.Env))
	}
	if got.Image != m.Spec.Image {
		diffs = append(diffs, fmt.Sprintf("image: ours %s, upstream %s", m.Spec.Image, got.Image))
	}
	nodes := m.Spec.Source.Nodes
	if nodes > 1 {
		diffs = append(diffs, compareRanks(m, head, got.WorkerArgvs)...)
	} else if len(head) > 0 {
		diffs = append(diffs, fmt.Sprintf("upstream has launcher flags %v on a one-node replica", head))
	}
	return strings.Join(diffs, "\n")
}

// compareRanks checks upstream's per-node flags against the launcher the renderer uses: the
// --nnodes launcher (--headless on workers) without data parallelism, else the data-parallel
// launcher with start rank = rank x data-parallel-size-local.
func compareRanks(m *v1alpha1.ModelMaster, head map[string]string, workers [][]string) []string {
	nodes := int(m.Spec.Source.Nodes)
	if len(workers) != nodes-1 {
		return []string{fmt.Sprintf("upstream renders %d worker commands for %d nodes", len(workers), nodes)}
	}
	local, _ := vllmargs.Value(m.Spec.Args, "--data-parallel-size-local")
	var diffs []string
	for rank := 0; rank < nodes; rank++ {
		flags := head
		if rank > 0 {
			var rest []string
			rest, flags = splitLauncher(workers[rank-1][3:])
			if !sameArgs(rest, m.Spec.Args) {
				diffs = append(diffs, fmt.Sprintf("rank %d args differ from the head's: %q", rank, rest))
			}
		}
		want := map[string]string{}
		if m.Spec.DataParallelSize > 1 {
			want["--data-parallel-address"] = "$HEAD_IP"
			if rank > 0 {
				l, _ := strconv.Atoi(local)
				want["--data-parallel-start-rank"] = strconv.Itoa(rank * l)
			}
		} else {
			want["--nnodes"], want["--node-rank"], want["--master-addr"] = strconv.Itoa(nodes), strconv.Itoa(rank), "$HEAD_IP"
			if rank > 0 {
				want["--headless"] = ""
			}
		}
		if fmt.Sprint(want) != fmt.Sprint(flags) {
			diffs = append(diffs, fmt.Sprintf("rank %d launcher flags: ours %v, upstream %v", rank, want, flags))
		}
	}
	return diffs
}

// sameArgs compares arg lists, a number written two ways (1.0 in the YAML, 1 once upstream's
// YAML reader has made it a number) counting as one.
func sameArgs(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] == b[i] {
			continue
		}
		x, err1 := strconv.ParseFloat(a[i], 64)
		y, err2 := strconv.ParseFloat(b[i], 64)
		if err1 != nil || err2 != nil || x != y {
			return false
		}
	}
	return true
}

// oracleTools finds node, upstream's command synthesis (copied into the cache as an ES
// module, after checking it is the 8959cf6 file) and js-yaml (installed into the cache from
// the npm registry on first use), or skips saying what is missing.
func oracleTools(t *testing.T) (node, synthesis, yamlDir string) {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("SKIPPED: node is not on PATH; the oracle runs upstream's JavaScript")
	}
	src := os.Getenv("INFERPLANE_RECIPES_UPSTREAM")
	if src == "" {
		t.Skip("SKIPPED: upstream's src/lib/command-synthesis.js is published to no registry this machine reaches (github.com does not resolve here): " +
			"set INFERPLANE_RECIPES_UPSTREAM to a checkout of github.com/vllm-project/recipes at 8959cf6 (or its src/lib) to run the oracle")
	}
	file := filepath.Join(src, "src", "lib", "command-synthesis.js")
	if _, err := os.Stat(file); err != nil {
		file = filepath.Join(src, "command-synthesis.js")
	}
	data, err := os.ReadFile(file)
	require.NoError(t, err, "INFERPLANE_RECIPES_UPSTREAM=%s holds no (src/lib/)command-synthesis.js", src)
	sum := sha256.Sum256(data)
	require.Equal(t, upstreamSynthesisSHA256, hex.EncodeToString(sum[:]),
		"%s is not the command-synthesis.js of vllm-project/recipes 8959cf6, the commit of the bundled corpus", file)

	cache := filepath.Join(cacheDir(t), "recipes-oracle")
	synthesis = filepath.Join(cache, "command-synthesis-8959cf6.mjs")
	require.NoError(t, os.MkdirAll(cache, 0o755))
	require.NoError(t, os.WriteFile(synthesis, data, 0o644))
	yamlDir = filepath.Join(cache, "js-yaml-"+jsYAMLVersion)
	if _, err := os.Stat(filepath.Join(yamlDir, "node_modules", "js-yaml", "package.json")); err != nil {
		npm, err := exec.LookPath("npm")
		if err != nil {
			t.Skip("SKIPPED: js-yaml is not in the cache and npm is not on PATH to install it")
		}
		out, err := exec.Command(npm, "install", "--prefix", yamlDir, "--no-save", "--no-audit", "--no-fund", "js-yaml@"+jsYAMLVersion).CombinedOutput()
		if err != nil {
			t.Skipf("SKIPPED: installing js-yaml %s from the npm registry failed: %v\n%s", jsYAMLVersion, err, out)
		}
	}
	return node, synthesis, yamlDir
}

// cacheDir is $INFERPLANE_CACHE, else the repository's .cache (git-ignored).
func cacheDir(t *testing.T) string {
	if c := os.Getenv("INFERPLANE_CACHE"); c != "" {
		return c
	}
	abs, err := filepath.Abs(filepath.Join("..", "..", ".cache"))
	require.NoError(t, err)
	return abs
}
