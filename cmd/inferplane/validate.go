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

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/generator/recipe"
	"github.com/inferplane/inferplane/generator/validate"
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
from its folder; with --tenants it is judged exactly as generate judges it (the same master and
rules, in the same words), without, as the webhook would judge it once rendered.

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
	cmd.Flags().StringVar(&o.tenantsDir, "tenants", "", usageTenants)
	cmd.Flags().StringVar(&o.recipesDir, "recipes", "", usageRecipes)
	cmd.Flags().BoolVar(&o.allowEmpty, "allow-empty", false, "exit 0 when no object is labelled inferplane.io/tenant (nothing to check)")
	return cmd
}

func runValidate(ctx context.Context, stdout, stderr io.Writer, o validateOptions) error {
	files, err := validateRead(o.paths)
	if err != nil {
		return usageErr(err)
	}
	opts := validate.Options{Files: files}
	if o.tenantsDir != "" {
		if info, err := os.Stat(o.tenantsDir); err != nil || !info.IsDir() {
			return usageErr(fmt.Errorf("--tenants %s: not a folder", o.tenantsDir))
		}
		if opts.Inputs, err = inputs.Load(os.DirFS(o.tenantsDir), o.tenantsDir); err != nil {
			return usageErr(err)
		}
	}
	if o.recipesDir != "" {
		if opts.Book, err = loadBook(o.recipesDir); err != nil {
			return usageErr(fmt.Errorf("--recipes %w", err))
		}
	}
	rep, err := validate.Run(ctx, opts)
	for _, p := range rep.Skipped {
		fmt.Fprintf(stderr, "validate: skipping %s: no Kubernetes object in it\n", p)
	}
	if err != nil {
		return usageErr(fmt.Errorf("%s: %w", strings.Join(o.paths, ", "), err))
	}
	for _, n := range rep.Notes {
		fmt.Fprintf(stderr, "validate: %s\n", n)
	}
	denied := rep.Denied()
	for _, line := range policy.DenialLines(denied) {
		fmt.Fprintln(stdout, line)
	}
	how := "labelled " + v1alpha1.LabelTenant
	if rep.InputJobs > 0 {
		how += fmt.Sprintf(", %d input jobs by their folder", rep.InputJobs)
	}
	fmt.Fprintf(stderr, "validate: %d files, %d objects: %d checked (%s), %d denied\n",
		rep.Files, rep.Documents, rep.Checked(), how, len(denied))
	switch {
	case len(denied) > 0:
		return &exitStatus{code: 1, err: fmt.Errorf("%d of %d checked objects denied", len(denied), rep.Checked())}
	case rep.Checked() == 0 && !o.allowEmpty:
		return usageErr(fmt.Errorf("NOTHING WAS CHECKED: no object in %s is labelled %s or is an input job in a <tenant>/jobs/ folder; "+
			"pass a tenant's rendered repository or its jobs (or --allow-empty to accept this)", strings.Join(o.paths, ", "), v1alpha1.LabelTenant))
	}
	return nil
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
