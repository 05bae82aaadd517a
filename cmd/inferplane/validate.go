package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/policy"
)

// validateOptions are validate's arguments and flags.
type validateOptions struct {
	paths                  []string
	tenantsDir, recipesDir string
	allowEmpty             bool
}

func newValidateCmd() *cobra.Command {
	var o validateOptions
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check manifests offline with the admission webhook's rules",
		Long: `validate runs the webhook's policy on manifest files, or folders of them (recursively: *.yaml,
*.yml, *.json; hidden entries are skipped, and so are YAML files that hold no Kubernetes
object, such as vcluster.yaml). It is what the webhook would say if the objects were applied
together: only objects labelled inferplane.io/tenant are checked, the others pass. An input job
file (<tenant>/jobs/<job>.yaml, as generate reads it) carries no such label: its tenant is taken
from its folder and it is checked as generate would render it.

Policy data (Tenants, NodeTypes, ModelMasters) comes from the PATHs themselves, then from
--tenants (the generator's input tree: nodetypes/, masters/, <tenant>/tenant.yaml), then, with
--recipes, from the masters the generator derives: for jobs whose spec.model is a recipe model
id, and, with --tenants too, for every job of the tree (so a rendered VM file checks alone).

Output: one line per broken rule on stdout,
  DENY <kind>/<namespace>/<name>: <field> is <value>: <what was expected>
(<kind>/<name> for cluster-scoped kinds), and a summary on stderr.

Exit status: 0 when every object passes, 1 when any is denied, 2 when the input is unusable
(a missing path, a YAML error, an unknown field, conflicting policy data) or when no object at
all was checked (nothing labelled inferplane.io/tenant; --allow-empty accepts that).`,
		Example: `  # A job as the operator wrote it: tenant acme from its folder, its master from the recipes
  inferplane validate --tenants tenants --recipes recipes tenants/acme/jobs/qwen3-32b.yaml

  # A tenant's rendered repository, as the webhook in its cluster would judge it
  inferplane generate && inferplane validate out/acme

  # One rendered VM: node types and tenants from the inputs, its master derived again
  inferplane validate --tenants tenants --recipes recipes out/acme/jobs/qwen3-32b/r0-n0-vm.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr(errors.New("validate needs at least one PATH (a manifest file or a folder)"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			o.paths = args
			return runValidate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	cmd.Flags().StringVar(&o.tenantsDir, "tenants", "", "the generator's tenants folder, for node types, tenants and hand-written masters")
	cmd.Flags().StringVar(&o.recipesDir, "recipes", "", "the vLLM recipes folder, to derive the masters of jobs that name a recipe model")
	cmd.Flags().BoolVar(&o.allowEmpty, "allow-empty", false, "exit 0 when no object is labelled inferplane.io/tenant (nothing to check)")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	return cmd
}

func runValidate(ctx context.Context, stdout, stderr io.Writer, o validateOptions) error {
	files, err := validateRead(o.paths)
	if err != nil {
		return usageErr(err)
	}
	decoded, err := policy.DecodeFiles(files)
	for _, p := range decoded.Skipped {
		fmt.Fprintf(stderr, "validate: skipping %s: no Kubernetes object in it\n", p)
	}
	if err != nil {
		return usageErr(err)
	}
	objs, inferred := inferTenants(decoded)
	base, err := validatePolicyData(ctx, stderr, o, objs)
	if err != nil {
		return usageErr(err)
	}
	results, err := policy.ReviewObjects(ctx, base, objs)
	if err != nil {
		return usageErr(fmt.Errorf("policy data in %s: %w", strings.Join(o.paths, ", "), err))
	}
	reviewed, denied := 0, 0
	for _, r := range results {
		if r.Guarded {
			reviewed++
		}
		if !r.Allowed() {
			denied++
			for _, line := range policy.DenialLines([]policy.Result{r}) {
				fmt.Fprintln(stdout, line)
			}
		}
	}
	how := "labelled " + v1alpha1.LabelTenant
	if inferred > 0 {
		how += fmt.Sprintf(", %d input jobs by their folder", inferred)
	}
	fmt.Fprintf(stderr, "validate: %d files, %d objects: %d checked (%s), %d denied\n",
		decoded.Files, decoded.Documents, reviewed, how, denied)
	switch {
	case denied > 0:
		return &exitStatus{code: 1, err: fmt.Errorf("%d of %d checked objects denied", denied, reviewed)}
	case reviewed == 0 && !o.allowEmpty:
		return usageErr(fmt.Errorf("NOTHING WAS CHECKED: no object in %s is labelled %s or is an input job in a <tenant>/jobs/ folder; "+
			"pass a tenant's rendered repository or its jobs (or --allow-empty to accept this)", strings.Join(o.paths, ", "), v1alpha1.LabelTenant))
	}
	return nil
}

// inferTenants labels the input jobs among objs, which the generator reads from
// <tenant>/jobs/<job>.yaml without a tenant label, as the generator renders them: tenant and
// namespace from the folder. It returns the objects (copies where labelled) and how many.
func inferTenants(d *policy.Decoded) ([]client.Object, int) {
	objs := make([]client.Object, len(d.Objects))
	n := 0
	for i, o := range d.Objects {
		objs[i] = o
		job, ok := o.(*v1alpha1.ManagedInferenceJob)
		if !ok || policy.IsGuarded(job) {
			continue
		}
		dir := filepath.Dir(filepath.Clean(d.Paths[i]))
		tenant := filepath.Base(filepath.Dir(dir))
		if filepath.Base(dir) != "jobs" || tenant == "." || tenant == string(filepath.Separator) || tenant == "" {
			continue
		}
		labelled := job.DeepCopy()
		if labelled.Labels == nil {
			labelled.Labels = map[string]string{}
		}
		labelled.Labels[v1alpha1.LabelTenant] = tenant
		if labelled.Namespace == "" {
			labelled.Namespace = tenant
		}
		objs[i] = labelled
		n++
	}
	return objs, n
}

// validatePolicyData is the policy data behind the objects' own: --tenants, then the masters
// derived with --recipes (jobs in objs are relabelled with their derived master's name).
func validatePolicyData(ctx context.Context, stderr io.Writer, o validateOptions, objs []client.Object) (policy.Overlay, error) {
	base := policy.Overlay{}
	var in *inputs.Inputs
	if o.tenantsDir != "" {
		var store *policy.Store
		var err error
		if in, store, err = validateTenantsData(o.tenantsDir); err != nil {
			return nil, err
		}
		base = append(base, store)
	}
	if o.recipesDir == "" {
		hintRecipes(ctx, stderr, objs, base)
		return base, nil
	}
	book, err := loadBook(o.recipesDir)
	if err != nil {
		return nil, fmt.Errorf("--recipes %w", err)
	}
	printWarnings(stderr, o.recipesDir, book)
	derived, err := validateDerive(ctx, stderr, book, objs, base)
	if err != nil {
		return nil, err
	}
	if in != nil {
		if err := deriveInputJobs(ctx, book, in, base, derived); err != nil {
			return nil, err
		}
	}
	return append(base, derived), nil
}

// hintRecipes says, without --recipes, which jobs name a model that is no master in the policy
// data: the denial that follows would otherwise read as if the model did not exist.
func hintRecipes(ctx context.Context, stderr io.Writer, objs []client.Object, base policy.Overlay) {
	local, err := policy.NewStore(objs...)
	if err != nil {
		return // the review reports the conflict
	}
	known := append(policy.Overlay{local}, base...)
	for _, o := range objs {
		job, ok := o.(*v1alpha1.ManagedInferenceJob)
		if !ok || !policy.IsGuarded(job) {
			continue
		}
		if name, _ := policy.JobMaster(job); name != "" && strings.Contains(name, "/") {
			if _, err := known.Master(ctx, name); policy.IsNotFound(err) {
				fmt.Fprintf(stderr, "validate: %s names model %q, which is no ModelMaster: pass --recipes DIR to derive its master\n",
					policy.RefOf(job), name)
			}
		}
	}
}

func printWarnings(stderr io.Writer, dir string, book *recipe.Book) {
	for _, w := range book.Warnings() {
		fmt.Fprintf(stderr, "warning: %s: %s\n", dir, w)
	}
}

// validateRead reads the files under paths: a file as given, a folder recursively (*.yaml,
// *.yml, *.json; hidden entries skipped). Every problem is collected, so one run reports all.
func validateRead(paths []string) (map[string][]byte, error) {
	files := map[string][]byte{}
	var problems []error
	read := func(p string) {
		data, err := os.ReadFile(p)
		if err != nil {
			problems = append(problems, err)
			return
		}
		files[p] = data
	}
	for _, root := range paths {
		info, err := os.Stat(root)
		if err != nil {
			problems = append(problems, err)
			continue
		}
		if !info.IsDir() {
			read(root)
			continue
		}
		err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if p != root && strings.HasPrefix(d.Name(), ".") {
				if d.IsDir() {
					return filepath.SkipDir
				}
				return nil
			}
			if d.Type().IsRegular() {
				switch strings.ToLower(filepath.Ext(p)) {
				case ".yaml", ".yml", ".json":
					read(p)
				}
			}
			return nil
		})
		if err != nil {
			problems = append(problems, err)
		}
	}
	return files, errors.Join(problems...)
}

// validateTenantsData loads the node types, hand-written masters and tenants of a tenants tree
// with the generator's own strict loader.
func validateTenantsData(dir string) (*inputs.Inputs, *policy.Store, error) {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, nil, fmt.Errorf("--tenants %s: not a folder", dir)
	}
	in, err := inputs.Load(os.DirFS(dir), dir)
	if err != nil {
		return nil, nil, err
	}
	store := &policy.Store{}
	add := func(file string, obj client.Object) error {
		if err := store.Add(obj); err != nil {
			return fmt.Errorf("%s: %w", file, err)
		}
		return nil
	}
	for i := range in.NodeTypes {
		if err := add(in.NodeTypes[i].File, &in.NodeTypes[i].Object); err != nil {
			return nil, nil, err
		}
	}
	for i := range in.Masters {
		if err := add(in.Masters[i].File, &in.Masters[i].Object); err != nil {
			return nil, nil, err
		}
	}
	for i := range in.Tenants {
		if err := add(in.Tenants[i].File, &in.Tenants[i].Object); err != nil {
			return nil, nil, err
		}
	}
	return in, store, nil
}

// validateDerive derives, with the recipes, the master of every guarded job whose master is
// not in the policy data, the way the generator does for the job's node type. The job in objs
// is replaced by a copy labelled with the derived master's name (as the generator labels it),
// and the master goes into the returned store.
func validateDerive(ctx context.Context, stderr io.Writer, book *recipe.Book, objs []client.Object, base policy.Overlay) (*policy.Store, error) {
	local, err := policy.NewStore(objs...)
	if err != nil {
		return nil, err
	}
	known := append(policy.Overlay{local}, base...)
	derived := &policy.Store{}
	for i, o := range objs {
		job, ok := o.(*v1alpha1.ManagedInferenceJob)
		if !ok || !policy.IsGuarded(job) {
			continue
		}
		m, err := deriveFor(ctx, book, known, job)
		if err != nil {
			fmt.Fprintf(stderr, "validate: %s: no master from recipe %q: %v\n", policy.RefOf(job), job.Spec.Model, err)
			continue
		}
		if m == nil {
			continue
		}
		if err := derived.Add(m); err != nil {
			return nil, err
		}
		labelled := job.DeepCopy()
		labelled.Labels[v1alpha1.LabelModelMaster] = m.Name
		objs[i] = labelled
	}
	return derived, nil
}

// deriveInputJobs adds the master of every job of the tenants tree to derived: the masters
// the generator renders, which rendered VMs name by their model-master label.
func deriveInputJobs(ctx context.Context, book *recipe.Book, in *inputs.Inputs, base policy.Overlay, derived *policy.Store) error {
	for _, t := range in.Tenants {
		for _, j := range t.Jobs {
			m, err := deriveFor(ctx, book, base, &j.Object)
			if err != nil || m == nil {
				continue // validate judges the rendered objects; generate reports the input's problems
			}
			if err := derived.Add(m); err != nil {
				return fmt.Errorf("%s: %w", j.File, err)
			}
		}
	}
	return nil
}

// deriveFor is the master the generator derives for job when the policy data has none by the
// job's master name: Parakeet's built-in one, or one from the recipe its spec.model names for
// its node type. nil, nil when there is nothing to derive (a known master, no recipe).
func deriveFor(ctx context.Context, book *recipe.Book, known policy.Source, job *v1alpha1.ManagedInferenceJob) (*v1alpha1.ModelMaster, error) {
	name, _ := policy.JobMaster(job)
	if _, err := known.Master(ctx, name); name != "" && !policy.IsNotFound(err) {
		return nil, nil // found, or a read error the review reports
	}
	switch {
	case job.Spec.EffectiveRuntime() == v1alpha1.RuntimeParakeet && (name == "" || recipe.IsParakeetName(name)):
		return recipe.Parakeet(), nil
	case book.Has(job.Spec.Model):
		nt, err := known.NodeType(ctx, job.Spec.NodeType)
		if err != nil {
			return nil, nil // the review reports the unknown node type
		}
		return book.Derive(recipe.Request{
			ModelID: job.Spec.Model, Variant: job.Spec.Variant, Strategy: job.Spec.Strategy, Features: job.Spec.Features,
			Hardware: recipe.HardwareOf(&nt.Spec),
		})
	}
	return nil, nil
}
