package apitest

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/inferplane/inferplane/e2e/gitserver"
)

// fleetFormat changes whenever what FleetCache writes changes, so that an old cache is not
// reused.
const fleetFormat = "fleet-v1"

// FleetCache returns a bare repository holding, in one commit, the inputs of Fleet's n
// synthetic tenants of `jobs` jobs each beside the bundled recipes, node types and masters,
// without spec.git (FleetFromCache adds it). 20,000 tenants x 10 jobs is 220,000 files: it is
// built once, with git fast-import (no work tree, a few seconds), into
// $INFERPLANE_CACHE/bench-api (the checkout's .cache by default), keyed by the content it holds,
// and reused by every later run.
func FleetCache(t testing.TB, n, jobs int) string {
	t.Helper()
	files := map[string]string{}
	for p, c := range Bundled(t) {
		if strings.HasPrefix(p, "recipes/") || strings.HasPrefix(p, "tenants/nodetypes/") || strings.HasPrefix(p, "tenants/masters/") {
			files[p] = c
		}
	}
	sum := sha256.New()
	fmt.Fprintf(sum, "%s %d %d\n%s%s", fleetFormat, n, jobs, FleetTenant("x"), FleetJob("x"))
	for _, p := range slices.Sorted(maps.Keys(files)) {
		fmt.Fprintf(sum, "%s %d\n%s", p, len(files[p]), files[p])
	}
	cache := os.Getenv("INFERPLANE_CACHE")
	if cache == "" {
		cache = filepath.Join(Root(), ".cache")
	}
	dir := filepath.Join(cache, "bench-api", fmt.Sprintf("fleet-%dx%d-%s.git", n, jobs, hex.EncodeToString(sum.Sum(nil))[:12]))
	if _, err := os.Stat(filepath.Join(dir, "refs", "heads", "main")); err == nil {
		return dir
	}
	if err := os.MkdirAll(filepath.Dir(dir), 0o755); err != nil {
		t.Fatal(err)
	}
	// Built beside and renamed into place: a run that dies half-way leaves no half repository,
	// and two runs building at once both end with a whole one.
	tmp, err := os.MkdirTemp(filepath.Dir(dir), ".building-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(tmp)
	gitserver.Git(t, "", "init", "-q", "--bare", "-b", "main", tmp)
	cmd := exec.Command("git", "fast-import", "--quiet")
	cmd.Dir = tmp
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	werr := writeFleet(stdin, files, n, jobs)
	cerr := stdin.Close()
	if err := cmd.Wait(); err != nil || werr != nil || cerr != nil {
		t.Fatalf("git fast-import of %d tenants: %v %v %v\n%s", n, err, werr, cerr, stderr.String())
	}
	if err := os.Rename(tmp, dir); err != nil {
		if _, serr := os.Stat(filepath.Join(dir, "refs", "heads", "main")); serr != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// writeFleet writes the fast-import stream of the fleet: each distinct content once as a blob,
// then one commit naming every file.
func writeFleet(w io.Writer, files map[string]string, n, jobs int) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	mark := 0
	blob := func(content string) int {
		mark++
		fmt.Fprintf(bw, "blob\nmark :%d\ndata %d\n%s\n", mark, len(content), content)
		return mark
	}
	var paths []string
	marks := map[string]int{}
	for _, p := range slices.Sorted(maps.Keys(files)) {
		paths = append(paths, p)
		marks[p] = blob(files[p])
	}
	jobMarks := make([]int, jobs)
	for j := range jobs {
		jobMarks[j] = blob(FleetJob(fmt.Sprintf("job-%02d", j)))
	}
	tenantMarks := make([]int, n)
	for i := range n {
		tenantMarks[i] = blob(FleetTenant(fmt.Sprintf("fleet-%04d", i)))
	}
	msg := fmt.Sprintf("fleet of %d tenants x %d jobs", n, jobs)
	fmt.Fprintf(bw, "commit refs/heads/main\ncommitter test <test@localhost> 1767225600 +0000\ndata %d\n%s\n", len(msg), msg)
	for _, p := range paths {
		fmt.Fprintf(bw, "M 100644 :%d %s\n", marks[p], p)
	}
	for i := range n {
		name := fmt.Sprintf("fleet-%04d", i)
		fmt.Fprintf(bw, "M 100644 :%d tenants/%s/tenant.yaml\n", tenantMarks[i], name)
		for j := range jobs {
			fmt.Fprintf(bw, "M 100644 :%d tenants/%s/jobs/job-%02d.yaml\n", jobMarks[j], name, j)
		}
	}
	fmt.Fprintf(bw, "\n")
	return bw.Flush()
}

// FleetFromCache makes the inputs repository "inputs" of r a copy of FleetCache(n, jobs) (its
// objects hard-linked, not copied) with one more commit that points the first `repos` tenants'
// spec.git at empty repositories of r, and returns its URL and the tenants' names: Fleet's
// result, in seconds at any size.
func FleetFromCache(t testing.TB, r Remotes, n, jobs, repos int) (url string, tenants []string) {
	t.Helper()
	src := FleetCache(t, n, jobs)
	dst := r.Path("inputs")
	gitserver.Git(t, "", "clone", "-q", "--bare", "--local", src, dst)
	var stream strings.Builder
	msg := "the tenants written to get their repositories"
	fmt.Fprintf(&stream, "commit refs/heads/main\ncommitter test <test@localhost> 1767225601 +0000\ndata %d\n%s\nfrom refs/heads/main^0\n", len(msg), msg)
	for i := range n {
		name := fmt.Sprintf("fleet-%04d", i)
		tenants = append(tenants, name)
		if i < repos {
			r.New(t, name, nil)
			content := r.WithGit(FleetTenant(name), name)
			fmt.Fprintf(&stream, "M 100644 inline tenants/%s/tenant.yaml\ndata %d\n%s\n", name, len(content), content)
		}
	}
	cmd := exec.Command("git", "fast-import", "--quiet", "--force")
	cmd.Dir = dst
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null")
	cmd.Stdin = strings.NewReader(stream.String())
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("git fast-import: %v\n%s", err, out)
	}
	return r.URL("inputs"), tenants
}
