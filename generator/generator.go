// Package generator runs the whole generator: load the inputs, plan, render every tenant,
// check every tenant's files, and only then write and commit each tenant's repository. A
// problem anywhere before the writing stops the run with nothing written or committed; the
// writing itself is per tenant (each repository is updated, committed and pushed on its own).
package generator

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/pmezard/go-difflib/difflib"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/generator/publish"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/policy"
)

// DefaultRepoURL is the URL Argo CD is told to pull a tenant's repository from when the tenant
// names no remote (the repository is then only out/<tenant> on this machine). "{tenant}" is
// replaced by the tenant's name. The .invalid domain never resolves: set Options.RepoURL (the
// CLI's --repo-url) to where out/ is served from to let Argo CD sync it.
const DefaultRepoURL = "https://git.invalid/inferplane/{tenant}.git"

// Options are the inputs and side effects of one run.
type Options struct {
	// RecipesDir, TenantsDir and OutDir are the folders (defaults: recipes, tenants, out).
	RecipesDir, TenantsDir, OutDir string
	// Recipes and Tenants, when set, are read instead of RecipesDir and TenantsDir, which then
	// only name them in messages.
	Recipes, Tenants fs.FS
	// Book, when set, is the recipes already loaded (from the same recipes tree): a caller that
	// renders one tenant per request (the product API) loads them once per recipes commit.
	Book *recipe.Book

	// Tenant, when set, limits the run to that tenant: the whole tenants tree is still loaded
	// and checked file by file, but only this tenant is planned, rendered and published (the
	// `jobs` commands change one tenant and must not commit the others).
	Tenant string

	// DryRun computes what would change, as unified diffs in the report, and writes nothing.
	DryRun bool

	// Running says what each tenant runs now, from the loaded inputs: the baseline its quota
	// keeps (plan.Running; a job that does not grow past it is never refused for quota). Nil:
	// what each tenant's repository under OutDir holds (RunningInOut), nothing for a tenant
	// without one. plan.AsRunning takes the inputs themselves (a run that only reads).
	Running func(in *inputs.Inputs) plan.Running

	// Check, when set, is called with each tenant's files before anything is written, for
	// several tenants at once (it must be safe for concurrent use); an error stops the run (e.g.
	// the admission policy refusing an object).
	Check func(tenant string, files render.Files) error

	// Render holds the render settings that are not inputs (guest image, storage class, ...).
	// RepoURL and Revision are set per tenant.
	Render render.Options
	// RepoURL is the Argo CD source URL of tenants without spec.git.url; "{tenant}" is
	// replaced by the tenant name. Empty: DefaultRepoURL.
	RepoURL string

	// Now is the commit time. Nil: time.Now.
	Now func() time.Time
	// Trailers end each tenant commit's message (publish.Options.Trailers): the product API
	// records the inputs commit a render came from.
	Trailers []string
	// Getenv reads the credentials a tenant's spec.git.auth names. Nil: os.Getenv.
	Getenv func(string) string
}

// Report is what a run did (or, for a dry run, would do), per tenant, sorted by tenant. The
// generator prints nothing: the caller shows the report (Summary and Diff per tenant).
type Report struct {
	DryRun  bool
	Tenants []TenantReport
	// Warnings are things that load but look wrong in the recipes the jobs use
	// (recipe.Book.WarningsFor), each prefixed with the recipes folder; the whole tree's are
	// recipe.Book.Warnings.
	Warnings []string
}

// TenantReport is one tenant's outcome.
type TenantReport struct {
	Tenant string
	// Dir is the tenant's repository folder.
	Dir    string
	Status publish.Status
	// Commit is the new commit ("" when unchanged or in a dry run).
	Commit  string
	Changes []publish.Change
	Pushed  bool
	// Files is the number of files in the tenant's repository.
	Files int
	// Diff is, in a dry run, what would change as unified diffs ("" when nothing would).
	Diff string
	// Err is why publishing the tenant failed (the run's error joins them); Status is then "".
	Err error
}

// tenantRun is one tenant between planning and publishing.
type tenantRun struct {
	tp     *plan.TenantPlan
	files  render.Files
	target publish.Target
}

// Generate runs the generator and returns what it did. Problems with the inputs are returned as
// a problem.Errors (and no report); a failure while publishing names the tenant, and the report
// then says which tenants were published and which failed.
func Generate(ctx context.Context, opts Options) (*Report, error) {
	opts.RecipesDir = cmp.Or(opts.RecipesDir, "recipes")
	opts.TenantsDir = cmp.Or(opts.TenantsDir, "tenants")
	opts.OutDir = cmp.Or(opts.OutDir, "out")

	runs, warnings, err := prepare(opts)
	if err != nil {
		return nil, err
	}

	rep := &Report{DryRun: opts.DryRun, Warnings: warnings}
	if opts.DryRun {
		for _, r := range runs {
			tr, err := dryRun(ctx, r)
			if err != nil {
				return nil, err
			}
			rep.Tenants = append(rep.Tenants, tr)
		}
		return rep, nil
	}

	now := opts.Now
	if now == nil {
		now = time.Now
	}
	var failed []error
	for _, r := range runs {
		if err := ctx.Err(); err != nil {
			failed = append(failed, fmt.Errorf("tenant %s: not published: %w", r.target.Name, err))
			continue
		}
		res, err := publish.Publish(ctx, r.target, r.files, publish.Options{Now: now, Group: group, Trailers: opts.Trailers})
		if err != nil {
			rep.Tenants = append(rep.Tenants, TenantReport{Tenant: r.target.Name, Dir: r.target.Dir, Files: len(r.files), Err: err})
			failed = append(failed, err)
			continue
		}
		rep.Tenants = append(rep.Tenants, TenantReport{Tenant: r.target.Name, Dir: r.target.Dir, Status: res.Status,
			Commit: res.Commit, Changes: res.Changes, Pushed: res.Pushed, Files: len(r.files)})
	}
	if len(failed) > 0 {
		return rep, errors.Join(failed...)
	}
	return rep, nil
}

// Rendered is one tenant's repository as Generate would publish it: its files, checked, and
// where they go.
type Rendered struct {
	Tenant string
	Files  render.Files
	Target publish.Target
}

// Render loads, plans, renders and checks exactly as Generate does (Options.Tenant applies) and
// publishes nothing: for a caller that commits the inputs first and publishes afterwards (the
// product API), with publish.Publish and the same Group (PublishOptions).
func Render(opts Options) ([]Rendered, error) {
	opts.RecipesDir = cmp.Or(opts.RecipesDir, "recipes")
	opts.TenantsDir = cmp.Or(opts.TenantsDir, "tenants")
	opts.OutDir = cmp.Or(opts.OutDir, "out")
	runs, _, err := prepare(opts)
	if err != nil {
		return nil, err
	}
	out := make([]Rendered, len(runs))
	for i, r := range runs {
		out[i] = Rendered{Tenant: r.target.Name, Files: r.files, Target: r.target}
	}
	return out, nil
}

// PublishOptions are the publish options Generate uses, so that a caller publishing what
// Render returned commits what generate would.
func PublishOptions(opts Options) publish.Options {
	return publish.Options{Now: opts.Now, Group: group, Trailers: opts.Trailers}
}

// Planned is the inputs loaded and planned, before anything is rendered.
type Planned struct {
	Inputs *inputs.Inputs
	// Book holds the recipes; nil when the recipes folder does not exist.
	Book *recipe.Book
	Plan *plan.Plan
}

// Plan loads and plans the inputs exactly as Generate does (Options.Tenant applies) and
// renders nothing: for commands that show or extend the plan.
func Plan(opts Options) (*Planned, error) {
	opts.RecipesDir = cmp.Or(opts.RecipesDir, "recipes")
	opts.TenantsDir = cmp.Or(opts.TenantsDir, "tenants")
	in, book, err := load(opts)
	if err != nil {
		return nil, err
	}
	running := RunningInOut(opts.OutDir)
	if opts.Running != nil {
		running = opts.Running(in)
	}
	p, err := plan.Build(in, book, running)
	if err != nil {
		if book == nil && opts.Recipes == nil {
			probs := problem.List(problem.Problems(err))
			probs.Add(opts.RecipesDir, nil, "the vLLM recipes tree (models/<org>/<repo>.yaml, strategies/, taxonomy.yaml); pass --recipes",
				"does not exist, so only hand-written masters and Parakeet resolve")
			return nil, probs.Err()
		}
		return nil, err
	}
	return &Planned{Inputs: in, Book: book, Plan: p}, nil
}

// RunningInOut is what each tenant runs as its repository under outDir holds it: the jobs of
// its jobs/<job>/job.yaml files as generate last rendered them (its work tree). A tenant
// without a repository there runs nothing; a job file that does not read counts as not
// running (its job is then held to the quota as new).
func RunningInOut(outDir string) plan.Running {
	return func(tenant string) map[string]policy.Claim {
		dir := filepath.Join(outDir, tenant, "jobs")
		entries, err := os.ReadDir(dir)
		if err != nil {
			return nil
		}
		out := map[string]policy.Claim{}
		for _, e := range entries {
			data, err := os.ReadFile(filepath.Join(dir, e.Name(), render.JobFile))
			if err != nil {
				continue
			}
			var j v1alpha1.ManagedInferenceJob
			if yaml.Unmarshal(data, &j) == nil && j.Name != "" {
				out[j.Name] = policy.JobClaim(&j)
			}
		}
		return out
	}
}

// load reads the tenants tree (only Options.Tenant's tenant, when set) and the recipes (nil
// when the recipes folder does not exist).
func load(opts Options) (*inputs.Inputs, *recipe.Book, error) {
	tenantsFS := opts.Tenants
	if tenantsFS == nil {
		if info, err := os.Stat(opts.TenantsDir); err != nil || !info.IsDir() {
			var probs problem.List
			probs.Add(opts.TenantsDir, nil, "a folder with nodetypes/, masters/ and one folder per tenant (pass --tenants)", "does not exist or is not a folder")
			return nil, nil, probs.Err()
		}
		tenantsFS = os.DirFS(opts.TenantsDir)
	}
	in, err := inputs.Load(tenantsFS, opts.TenantsDir)
	if err != nil {
		return nil, nil, err
	}
	if opts.Tenant != "" {
		if err := onlyTenant(in, opts.Tenant, opts.TenantsDir); err != nil {
			return nil, nil, err
		}
	}
	if opts.Book != nil {
		return in, opts.Book, nil
	}
	recipesFS := opts.Recipes
	if recipesFS == nil {
		if info, err := os.Stat(opts.RecipesDir); err != nil || !info.IsDir() {
			return in, nil, nil
		}
		recipesFS = os.DirFS(opts.RecipesDir)
	}
	book, err := recipe.Load(recipesFS)
	if err != nil {
		return nil, nil, prefixRecipeErr(err, opts.RecipesDir)
	}
	return in, book, nil
}

// prepare is everything before the first write: load, plan, render, credentials, check. It
// also returns the warnings about the recipes the planned jobs use.
func prepare(opts Options) ([]tenantRun, []string, error) {
	planned, err := Plan(opts)
	if err != nil {
		return nil, nil, err
	}
	runs, err := renderAll(opts, planned.Inputs, planned.Plan)
	if err != nil {
		return nil, nil, err
	}
	var warnings []string
	if planned.Book != nil {
		for _, tp := range planned.Plan.Tenants {
			for _, jp := range tp.Jobs {
				for _, w := range planned.Book.WarningsFor(jp.Job.Spec.Model) {
					if w = opts.RecipesDir + ": " + w; !slices.Contains(warnings, w) {
						warnings = append(warnings, w)
					}
				}
			}
		}
	}
	return runs, warnings, nil
}

// renderAll renders and checks every tenant of the plan (in parallel) and finds where each is
// published; every problem of every tenant comes back at once.
func renderAll(opts Options, in *inputs.Inputs, p *plan.Plan) ([]tenantRun, error) {
	var probs problem.List
	runs := make([]tenantRun, len(p.Tenants))
	errs := make([]error, len(p.Tenants))
	checkErrs := make([]error, len(p.Tenants))
	tenantFile := map[string]string{}
	for _, t := range in.Tenants {
		tenantFile[t.Object.Name] = t.File
	}
	parallel(len(p.Tenants), func(i int) {
		tp := &p.Tenants[i]
		runs[i].tp = tp
		runs[i].files, errs[i] = render.Tenant(*tp, renderOptions(opts, tp))
		if errs[i] == nil && opts.Check != nil {
			checkErrs[i] = opts.Check(tp.Tenant.Name, runs[i].files)
		}
	})
	getenv := opts.Getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	for i := range runs {
		name := runs[i].tp.Tenant.Name
		if errs[i] != nil {
			addErr(&probs, errs[i], tenantFile[name], "", "")
			continue
		}
		target, tprobs := targetOf(runs[i].tp, tenantFile[name], opts.OutDir, getenv)
		probs.Merge(tprobs)
		runs[i].target = target
		if checkErrs[i] != nil {
			addErr(&probs, checkErrs[i], filepath.Join(opts.OutDir, name), "objects the admission policy admits", "refused by the check: ")
		}
	}
	if err := probs.Err(); err != nil {
		return nil, err
	}
	return runs, nil
}

// onlyTenant drops every tenant but name from in; a name no tenant has is a problem.
func onlyTenant(in *inputs.Inputs, name, dir string) error {
	var names []string
	for _, t := range in.Tenants {
		if t.Object.Name == name {
			in.Tenants = []inputs.Tenant{t}
			return nil
		}
		names = append(names, t.Object.Name)
	}
	var probs problem.List
	probs.Add(filepath.Join(dir, name, inputs.TenantFile), nil, "one of the tenants: "+strings.Join(names, ", "),
		"unknown tenant %q: no tenant folder with a %s", name, inputs.TenantFile)
	return probs.Err()
}

// addErr records err as problems: its own when it is a problem list, else one problem.
func addErr(probs *problem.List, err error, file, expected, prefix string) {
	if ps := problem.Problems(err); len(ps) > 0 {
		probs.Merge(ps)
		return
	}
	probs.Add(file, nil, expected, "%s%v", prefix, err)
}

// prefixRecipeErr puts the recipes folder in front of the file names of recipe problems.
func prefixRecipeErr(err error, dir string) error {
	ps := problem.Problems(err)
	if len(ps) == 0 {
		return fmt.Errorf("%s: %w", dir, err)
	}
	var out problem.List
	for _, p := range ps {
		if !strings.HasPrefix(p.File, dir+"/") {
			p.File = filepath.ToSlash(filepath.Join(dir, p.File))
		}
		out = append(out, p)
	}
	return out.Err()
}

func renderOptions(opts Options, tp *plan.TenantPlan) render.Options {
	ro := opts.Render
	ro.RepoURL = tp.Tenant.Spec.Git.URL
	if ro.RepoURL == "" {
		ro.RepoURL = strings.ReplaceAll(cmp.Or(opts.RepoURL, DefaultRepoURL), "{tenant}", tp.Tenant.Name)
	}
	ro.Revision = cmp.Or(tp.Tenant.Spec.Git.Branch, publish.DefaultBranch)
	return ro
}

// targetOf is where a tenant's repository lives, with its credentials read from the
// environment variables the tenant names.
func targetOf(tp *plan.TenantPlan, file, outDir string, getenv func(string) string) (publish.Target, problem.List) {
	return TargetOf(&tp.Tenant, file, outDir, getenv)
}

// TargetOf is where tenant t's repository lives (outDir/<tenant> as the work tree; its
// spec.git remote, if any), with the credentials its spec.git.auth names read through getenv;
// problems name file (its tenant.yaml).
func TargetOf(tn *v1alpha1.Tenant, file, outDir string, getenv func(string) string) (publish.Target, problem.List) {
	var probs problem.List
	g := tn.Spec.Git
	t := publish.Target{
		Name:   tn.Name,
		Dir:    filepath.Join(outDir, tn.Name),
		URL:    g.URL,
		Branch: cmp.Or(g.Branch, publish.DefaultBranch),
	}
	if g.Auth == nil || g.URL == "" {
		return t, probs
	}
	if !strings.HasPrefix(g.URL, "https://") && !strings.HasPrefix(g.URL, "http://") {
		probs.Add(file, field.NewPath("spec", "git", "auth"), "no auth for this URL: ssh URLs use the ssh agent, file URLs need none",
			"names credentials, which are used for http(s) URLs only")
		return t, probs
	}
	password := getenv(g.Auth.PasswordEnv)
	if password == "" {
		probs.Add(file, field.NewPath("spec", "git", "auth", "passwordEnv"), "the variable set to the password or token for "+publish.Redact(g.URL),
			"environment variable %s is not set or empty", g.Auth.PasswordEnv)
	}
	user := "inferplane"
	if g.Auth.UsernameEnv != "" {
		user = getenv(g.Auth.UsernameEnv)
		if user == "" {
			probs.Add(file, field.NewPath("spec", "git", "auth", "usernameEnv"), "the variable set to the user name for "+publish.Redact(g.URL),
				"environment variable %s is not set or empty", g.Auth.UsernameEnv)
		}
	}
	var auth transport.AuthMethod = &githttp.BasicAuth{Username: user, Password: password}
	t.Auth = auth
	return t, probs
}

// group names the part of a tenant's repository a path belongs to, for commit messages.
func group(p string) string {
	if rest, ok := strings.CutPrefix(p, render.JobDir("")); ok {
		job, _, _ := strings.Cut(rest, "/")
		return "job " + job
	}
	if rest, ok := strings.CutPrefix(p, strings.TrimSuffix(render.ApplicationFile(""), ".yaml")); ok {
		return "job " + strings.TrimSuffix(rest, ".yaml")
	}
	return "tenant"
}

// dryRun says what publishing would change, as unified diffs, writing nothing.
func dryRun(ctx context.Context, r tenantRun) (TenantReport, error) {
	cur, exists, err := publish.Current(ctx, r.target)
	if err != nil {
		return TenantReport{}, err
	}
	tr := TenantReport{Tenant: r.target.Name, Dir: r.target.Dir, Files: len(r.files), Status: publish.Unchanged}
	changes := publish.DiffFiles(cur, r.files)
	tr.Changes = changes
	if len(changes) > 0 {
		tr.Status = publish.Updated
		if !exists {
			tr.Status = publish.Created
		}
	}
	var diff strings.Builder
	for _, c := range changes {
		diff.WriteString(unifiedDiff(c, cur[c.Path], r.files[c.Path]))
	}
	tr.Diff = diff.String()
	return tr, nil
}

func unifiedDiff(c publish.Change, old, new []byte) string {
	from, to := "a/"+c.Path, "b/"+c.Path
	switch c.Op {
	case publish.Added:
		from = "/dev/null"
	case publish.Deleted:
		to = "/dev/null"
	}
	text, err := difflib.GetUnifiedDiffString(difflib.UnifiedDiff{
		A: splitLines(old), B: splitLines(new), FromFile: from, ToFile: to, Context: 3,
	})
	if err != nil {
		return fmt.Sprintf("%s: cannot diff: %v\n", c.Path, err)
	}
	return text
}

// splitLines keeps line endings, and marks a last line without one as git does.
func splitLines(b []byte) []string {
	if len(b) == 0 {
		return nil
	}
	lines := strings.SplitAfter(string(b), "\n")
	if lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	} else {
		lines[len(lines)-1] += "\n\\ No newline at end of file\n"
	}
	return lines
}

// Summary is the one-line report of a tenant: "acme: updated (out/acme: 1 added, ...)", "would
// be ..." in a dry run, "failed: <why>" when publishing failed.
func (tr TenantReport) Summary(dry bool) string {
	if tr.Err != nil {
		return fmt.Sprintf("%s: failed: %v", tr.Tenant, tr.Err)
	}
	counts := map[publish.Op]int{}
	for _, c := range tr.Changes {
		counts[c.Op]++
	}
	status := string(tr.Status)
	if dry && tr.Status != publish.Unchanged {
		status = "would be " + status
	}
	line := fmt.Sprintf("%s: %s", tr.Tenant, status)
	if tr.Status == publish.Unchanged {
		return line + fmt.Sprintf(" (%s, %d files)", tr.Dir, tr.Files)
	}
	line += fmt.Sprintf(" (%s: %d added, %d modified, %d deleted", tr.Dir, counts[publish.Added], counts[publish.Modified], counts[publish.Deleted])
	if tr.Commit != "" {
		line += ", commit " + tr.Commit[:12]
	}
	if tr.Pushed {
		line += ", pushed"
	}
	return line + ")"
}

// parallel runs fn for 0..n-1 on up to GOMAXPROCS goroutines.
func parallel(n int, fn func(i int)) {
	workers := min(n, runtime.GOMAXPROCS(0))
	var wg sync.WaitGroup
	next := make(chan int)
	for range workers {
		wg.Go(func() {
			for i := range next {
				fn(i)
			}
		})
	}
	for i := range n {
		next <- i
	}
	close(next)
	wg.Wait()
}
