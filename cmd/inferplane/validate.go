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

func newValidateCmd() *cobra.Command {
	var tenantsDir, recipesDir string
	cmd := &cobra.Command{
		Use:   "validate PATH...",
		Short: "Check manifests offline with the admission webhook's rules",
		Long: `validate runs the webhook's policy on manifest files, or folders of them (recursively: *.yaml,
*.yml, *.json; hidden entries are skipped, and so are YAML files that hold no Kubernetes
object, such as vcluster.yaml). It is what the webhook would say if the objects were applied
together: only objects labelled inferplane.io/tenant are checked, the others pass.

Policy data (Tenants, NodeTypes, ModelMasters) comes from the PATHs themselves, then from
--tenants (the generator's input tree: nodetypes/, masters/, <tenant>/tenant.yaml), then, for
jobs whose spec.model is a recipe model id, from masters derived with --recipes.

Output: one line per broken rule on stdout,
  DENY <kind>/<namespace>/<name>: <field> is <value>: <what was expected>
(<kind>/<name> for cluster-scoped kinds), and a summary on stderr.

Exit status: 0 when every object passes, 1 when any is denied, 2 when the input is unusable
(a missing path, a YAML error, an unknown field, conflicting policy data).`,
		Example: `  inferplane validate out/acme
  inferplane validate --tenants tenants jobs/chat.yaml`,
		Args: func(_ *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageErr(errors.New("validate needs at least one PATH (a manifest file or a folder)"))
			}
			return nil
		},
		RunE: func(cmd *cobra.Command, args []string) error {
			return runValidate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), args, tenantsDir, recipesDir)
		},
	}
	cmd.Flags().StringVar(&tenantsDir, "tenants", "", "the generator's tenants folder, for node types, tenants and hand-written masters")
	cmd.Flags().StringVar(&recipesDir, "recipes", "", "the vLLM recipes folder, to derive the masters of jobs that name a recipe model")
	cmd.SetFlagErrorFunc(func(_ *cobra.Command, err error) error { return usageErr(err) })
	return cmd
}

func runValidate(ctx context.Context, stdout, stderr io.Writer, paths []string, tenantsDir, recipesDir string) error {
	files, err := validateRead(paths)
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
	base := policy.Overlay{}
	if tenantsDir != "" {
		store, err := validateTenantsData(tenantsDir)
		if err != nil {
			return usageErr(err)
		}
		base = append(base, store)
	}
	objs := decoded.Objects
	if recipesDir != "" {
		derived, err := validateDerive(ctx, stderr, recipesDir, objs, base)
		if err != nil {
			return usageErr(err)
		}
		base = append(base, derived)
	}
	results, err := policy.ReviewObjects(ctx, base, objs)
	if err != nil {
		return usageErr(fmt.Errorf("policy data in %s: %w", strings.Join(paths, ", "), err))
	}
	reviewed, denied := 0, 0
	for _, r := range results {
		if r.Guarded {
			reviewed++
		}
		if r.Allowed() {
			continue
		}
		denied++
		for _, line := range policy.DenialLines([]policy.Result{r}) {
			fmt.Fprintln(stdout, line)
		}
	}
	fmt.Fprintf(stderr, "validate: %d files, %d objects: %d checked (labelled %s), %d denied\n",
		decoded.Files, decoded.Documents, reviewed, v1alpha1.LabelTenant, denied)
	if denied > 0 {
		return &exitStatus{code: 1, err: fmt.Errorf("%d of %d checked objects denied", denied, reviewed)}
	}
	return nil
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
func validateTenantsData(dir string) (*policy.Store, error) {
	if info, err := os.Stat(dir); err != nil || !info.IsDir() {
		return nil, fmt.Errorf("--tenants %s: not a folder", dir)
	}
	in, err := inputs.Load(os.DirFS(dir), dir)
	if err != nil {
		return nil, err
	}
	store := &policy.Store{}
	for _, nt := range in.NodeTypes {
		if err := store.Add(&nt.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", nt.File, err)
		}
	}
	for _, m := range in.Masters {
		if err := store.Add(&m.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", m.File, err)
		}
	}
	for _, t := range in.Tenants {
		if err := store.Add(&t.Object); err != nil {
			return nil, fmt.Errorf("%s: %w", t.File, err)
		}
	}
	return store, nil
}

// validateDerive derives, with the recipes, the master of every guarded job whose master is
// not in the policy data, the way the generator does for the job's node type. The job in objs
// is replaced by a copy labelled with the derived master's name (as the generator labels it),
// and the master goes into the returned store.
func validateDerive(ctx context.Context, stderr io.Writer, dir string, objs []client.Object, base policy.Overlay) (*policy.Store, error) {
	book, err := loadBook(dir)
	if err != nil {
		return nil, fmt.Errorf("--recipes %w", err)
	}
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
		name, _ := policy.JobMaster(job)
		if _, err := known.Master(ctx, name); name != "" && !policy.IsNotFound(err) {
			continue // found, or a read error the review reports
		}
		var m *v1alpha1.ModelMaster
		switch {
		case job.Spec.EffectiveRuntime() == v1alpha1.RuntimeParakeet && (name == "" || recipe.IsParakeetName(name)):
			m = recipe.Parakeet()
		case book.Has(job.Spec.Model):
			nt, err := known.NodeType(ctx, job.Spec.NodeType)
			if err != nil {
				continue // the review reports the unknown node type
			}
			m, err = book.Derive(recipe.Request{
				ModelID: job.Spec.Model, Variant: job.Spec.Variant, Strategy: job.Spec.Strategy, Features: job.Spec.Features,
				Hardware: recipe.HardwareOf(&nt.Spec),
			})
			if err != nil {
				fmt.Fprintf(stderr, "validate: ManagedInferenceJob/%s/%s: no master from recipe %q: %v\n", job.Namespace, job.Name, job.Spec.Model, err)
				continue
			}
		default:
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
