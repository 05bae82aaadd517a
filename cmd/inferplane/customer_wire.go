package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
)

// operatorFlags point a customer command at the operator's own files, clusters or gateway:
// given any of them, the command works as it does without a context.
var operatorFlags = []string{"tenants", "recipes", "out", "out-dir", "server", "store-file", "keys-file", "secret-file",
	"kubeconfig", "context", "tenant-context", "tenant-clusters", "namespace", "dry-run", "no-commit", "replace"}

// apiRun is a command's form through the product API.
type apiRun func(cmd *cobra.Command, s *apiSession, args []string) error

// wireAPI makes the customer's commands call the product API when a context is current
// (inferplane login) and no operator flag was given: each command keeps its own flags and
// arguments, and only its RunE is wrapped.
func wireAPI(root *cobra.Command) {
	for path, run := range map[string]apiRun{
		"jobs list":    apiJobsListCmd,
		"jobs detail":  apiJobsDetailCmd,
		"jobs create":  apiJobsCreateCmd,
		"jobs restart": apiJobsRestartCmd,
		"jobs delete":  apiJobsDeleteCmd,
		"jobs logs":    apiJobsLogsCmd,
		"keys create":  apiKeysCreateCmd,
		"keys list":    apiKeysListCmd,
		"keys revoke":  apiKeysRevokeCmd,
		"keys limit":   apiKeysLimitCmd,
		"keys usage":   apiUsageCmd,
		"health":       apiHealthCmd,
	} {
		cmd, _, err := root.Find(strings.Fields(path))
		if err != nil || cmd.CommandPath() != "inferplane "+path {
			panic("wireAPI: no command " + path)
		}
		wrap(cmd, run)
	}
	models, _, err := root.Find([]string{"models"})
	if err != nil || models.Name() != "models" {
		panic("wireAPI: no models command")
	}
	models.AddCommand(newModelsListCmd())
}

func wrap(cmd *cobra.Command, run apiRun) {
	if cmd.Flags().Lookup("output") == nil {
		var o string
		registerOutput(cmd, &o, "table", "", "table", "json", "yaml")
	}
	files := cmd.RunE
	// A context names the caller's tenant: --tenant is required on the operator's files only.
	if f := cmd.Flags().Lookup("tenant"); f != nil && len(f.Annotations[cobra.BashCompOneRequiredFlag]) > 0 {
		delete(f.Annotations, cobra.BashCompOneRequiredFlag)
		onFiles := files
		files = func(cmd *cobra.Command, args []string) error {
			if !cmd.Flags().Changed("tenant") {
				return usageErr(errors.New(`required flag(s) "tenant" not set (or sign in: inferplane login URL)`))
			}
			return onFiles(cmd, args)
		}
	}
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		for _, name := range operatorFlags {
			if f := cmd.Flags().Lookup(name); f != nil && f.Changed {
				return files(cmd, args)
			}
		}
		s, err := currentSession()
		if err != nil {
			return err
		}
		if s == nil {
			return files(cmd, args)
		}
		return run(cmd, s, args)
	}
	cmd.Long += "\n\nWith a current context (inferplane login), this calls the product API as the signed-in user;\n" +
		"--tenants (or another flag naming the operator's files, clusters or gateway) works on those instead."
}

func flagString(fs *pflag.FlagSet, name string) string {
	if f := fs.Lookup(name); f != nil {
		return f.Value.String()
	}
	return ""
}

// output is the command's -o, "table" for its default human form.
func output(cmd *cobra.Command, formats ...string) (string, error) {
	o := flagString(cmd.Flags(), "output")
	if f := cmd.Flags().Lookup("output"); o == "" || (f != nil && o == f.DefValue && o != "json" && o != "yaml") {
		o = "table" // the command's own human form, whatever it calls it
	}
	return o, checkFormat(o, append([]string{"table"}, formats...)...)
}

// outputAndTenant reads a command's -o (table or one of formats) and --tenant (default: the
// context's).
func (s *apiSession) outputAndTenant(cmd *cobra.Command, formats ...string) (string, string, error) {
	o, err := output(cmd, formats...)
	if err != nil {
		return "", "", err
	}
	t, err := s.tenant(flagString(cmd.Flags(), "tenant"))
	return o, t, err
}

// outputAndJob reads a command's -o (table or one of formats) and its job arguments.
func (s *apiSession) outputAndJob(cmd *cobra.Command, args []string, formats ...string) (o, tenant, job string, err error) {
	if o, err = output(cmd, formats...); err != nil {
		return "", "", "", err
	}
	tenant, job, err = s.tenantJob(args)
	return o, tenant, job, err
}

// tenantJob reads a job's arguments: <tenant>/<job>, <tenant> <job>, or <job> in the context's
// default tenant.
func (s *apiSession) tenantJob(args []string) (string, string, error) {
	switch {
	case len(args) == 2:
		return args[0], args[1], nil
	case len(args) == 1 && strings.Contains(args[0], "/"):
		t, j, _ := strings.Cut(args[0], "/")
		if t != "" && j != "" && !strings.Contains(j, "/") {
			return t, j, nil
		}
	case len(args) == 1:
		t, err := s.tenant("")
		return t, args[0], err
	}
	return "", "", usageErr(fmt.Errorf("expected <tenant>/<job>, e.g. acme/chat (got %q)", strings.Join(args, " ")))
}

func apiJobsListCmd(cmd *cobra.Command, s *apiSession, _ []string) error {
	o, t, err := s.outputAndTenant(cmd, "json", "yaml", "name")
	if err != nil {
		return err
	}
	return s.jobsList(cmd.Context(), cmd.OutOrStdout(), t, o)
}

func apiJobsDetailCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	o, t, j, err := s.outputAndJob(cmd, args, "json", "yaml")
	if err != nil {
		return err
	}
	var w waitFlags
	w.wait, _ = cmd.Flags().GetBool("wait")
	if w.timeout, err = cmd.Flags().GetDuration("wait-timeout"); err != nil {
		return err
	}
	return s.jobsDetail(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), t, j, o, w)
}

func apiJobsCreateCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	o, t, j, err := s.outputAndJob(cmd, args, "json", "yaml")
	if err != nil {
		return err
	}
	fs := cmd.Flags()
	job := apiv1.JobCreate{Name: j, Model: flagString(fs, "model"), Runtime: flagString(fs, "runtime"), Variant: flagString(fs, "variant"),
		Strategy: flagString(fs, "strategy"), NodeType: flagString(fs, "node-type"), ModelCacheSize: flagString(fs, "model-cache-size")}
	if job.GPUCount, err = fs.GetInt32("gpus"); err != nil {
		return err
	}
	if job.Replicas, err = fs.GetInt32("replicas"); err != nil {
		return err
	}
	if noKey, _ := fs.GetBool("no-api-key"); noKey {
		f := false
		job.RequireAPIKey = &f
	}
	features, _ := fs.GetStringArray("feature")
	for _, kv := range features {
		k, v, ok := strings.Cut(kv, "=")
		if !ok || (v != "on" && v != "off") {
			return usageErr(fmt.Errorf("--feature %q: expected name=on or name=off", kv))
		}
		if job.Features == nil {
			job.Features = map[string]bool{}
		}
		job.Features[k] = v == "on"
	}
	return s.jobsCreate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), t, job, o)
}

func apiJobsRestartCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	t, j, err := s.tenantJob(args)
	if err != nil {
		return err
	}
	replica := int32(-1)
	if f := cmd.Flags().Lookup("replica"); f != nil && f.Changed {
		if replica, err = cmd.Flags().GetInt32("replica"); err != nil {
			n, ierr := cmd.Flags().GetInt("replica")
			if ierr != nil {
				return err
			}
			replica = int32(n)
		}
	}
	return s.jobsRestart(cmd.Context(), cmd.OutOrStdout(), t, j, replica)
}

func apiJobsDeleteCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	t, j, err := s.tenantJob(args)
	if err != nil {
		return err
	}
	if yes, _ := cmd.Flags().GetBool("yes"); !yes {
		return usageErr(fmt.Errorf("jobs delete %s/%s removes the job and its VMs: pass --yes", t, j))
	}
	revoke, _ := cmd.Flags().GetBool("revoke-keys")
	return s.jobsDelete(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), t, j, revoke)
}

func apiKeysCreateCmd(cmd *cobra.Command, s *apiSession, _ []string) error {
	o, t, err := s.outputAndTenant(cmd, "json", "yaml")
	if err != nil {
		return err
	}
	fs := cmd.Flags()
	k := apiv1.KeyCreate{Name: flagString(fs, "name"), Endpoint: flagString(fs, "endpoint"), Expires: flagString(fs, "expires")}
	lf := limitFlagsOf(fs)
	if k.Limits, err = lf.spec(); err != nil {
		return err
	}
	return s.keysCreate(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), t, k, o, flagString(fs, "file"))
}

func apiKeysListCmd(cmd *cobra.Command, s *apiSession, _ []string) error {
	o, t, err := s.outputAndTenant(cmd, "json", "yaml", "name")
	if err != nil {
		return err
	}
	return s.keysList(cmd.Context(), cmd.OutOrStdout(), t, o)
}

func apiKeysRevokeCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	t, err := s.tenant(flagString(cmd.Flags(), "tenant"))
	if err != nil {
		return err
	}
	if yes, _ := cmd.Flags().GetBool("yes"); !yes && cmd.Flags().Lookup("yes") != nil {
		return usageErr(fmt.Errorf("keys revoke is final: pass --yes"))
	}
	for _, id := range args {
		if err := s.keysRevoke(cmd.Context(), cmd.OutOrStdout(), t, id); err != nil {
			return err
		}
	}
	return nil
}

func apiKeysLimitCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	lf := limitFlagsOf(cmd.Flags())
	clear, _ := cmd.Flags().GetBool("clear")
	spec, err := limitRequest(args[0], &lf, clear)
	if err != nil {
		return err
	}
	t, err := s.tenant(flagString(cmd.Flags(), "tenant"))
	if err != nil {
		return err
	}
	return s.keysLimit(cmd.Context(), cmd.OutOrStdout(), t, args[0], spec)
}

func apiUsageCmd(cmd *cobra.Command, s *apiSession, _ []string) error {
	o, t, err := s.outputAndTenant(cmd, "json", "yaml")
	if err != nil {
		return err
	}
	fs := cmd.Flags()
	q := apiclient.UsageQuery{Since: flagString(fs, "since"), Until: flagString(fs, "until"), Key: flagString(fs, "key"), Endpoint: flagString(fs, "endpoint")}
	return s.usage(cmd.Context(), cmd.OutOrStdout(), t, q, o)
}

func apiHealthCmd(cmd *cobra.Command, s *apiSession, _ []string) error {
	o, t, err := s.outputAndTenant(cmd, "json", "yaml")
	if err != nil {
		return err
	}
	return s.health(cmd.Context(), cmd.OutOrStdout(), t, o)
}

// newModelsListCmd is `models list`: what a tenant may run, from the product API.
func newModelsListCmd() *cobra.Command {
	var tenant, out string
	cmd := &cobra.Command{
		Use:   "list [--tenant T] [-o table|json|yaml|name]",
		Short: "What a tenant may run: each model on each allowed node type, with GPUs per replica and why (product API)",
		Long: `models list asks the product API of the current context (inferplane login) which models the
tenant may run: hand-written masters, Parakeet and every recipe, on each node type the tenant
allows where a job naming it would be admitted, with the GPUs and nodes each replica needs and
why. Operators read the same from their files with inferplane recipe list and recipe show.`,
		Example: `  inferplane models list
  inferplane models list --tenant acme -o yaml`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := checkFormat(out, "table", "json", "yaml", "name"); err != nil {
				return err
			}
			s, err := currentSession()
			if err != nil {
				return err
			}
			if s == nil {
				return noContext("", nil)
			}
			t, err := s.tenant(tenant)
			if err != nil {
				return err
			}
			return s.modelsList(cmd.Context(), cmd.OutOrStdout(), t, out)
		},
	}
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant whose models to list (default: the context's)")
	registerOutput(cmd, &out, "table", "", "table", "json", "yaml", "name")
	return cmd
}
