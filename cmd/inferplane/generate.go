package main

import (
	"errors"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/gateway/install"
	"github.com/inferplane/inferplane/generator"
	apiinstall "github.com/inferplane/inferplane/productapi/install"
)

func newGenerateCmd() *cobra.Command {
	var (
		in         inputFlags
		gatewayDir string
		gateway    install.Options
		apiOpts    apiinstall.Options
	)
	cmd := &cobra.Command{
		Use:   "generate",
		Short: "Render every tenant's GitOps repository from recipes and job specs, and commit it",
		Long: `generate turns the inputs into each tenant's GitOps state and commits it:

  recipes/   vLLM recipes in the upstream vllm-project/recipes layout
  tenants/   nodetypes/*.yaml, masters/*.yaml, <tenant>/tenant.yaml, <tenant>/jobs/*.yaml

For every tenant it writes out/<tenant>: vcluster.yaml, the Platform project, the Argo CD
AppProject and one Application per job, and per job a kustomization with KubeVirt VMs,
cloud-init Secrets, model-cache PVCs and Services.

Everything is loaded, planned, rendered and checked first; if any input of any tenant is wrong,
generate prints every problem (file, field, what was expected), writes nothing and exits 1.

Without spec.git.url, out/<tenant> is itself a git repository. With a URL, out/<tenant> is a
clone: generate fetches, commits on top and pushes (credentials come from the environment
variables spec.git.auth names). A commit is made only when a file changed; a run on unchanged
inputs writes nothing. Each line of output says whether a tenant was created, updated or left
unchanged.`,
		Example: `  # Render the bundled examples into ./out (one git repository per tenant)
  inferplane generate

  # See what would change, as unified diffs, without writing anything
  inferplane generate --dry-run

  # Other folders, and the URL Argo CD pulls tenants without a remote from
  inferplane generate --recipes ~/src/vllm-recipes --tenants ./prod/tenants --out-dir /srv/gitops \
      --repo-url 'https://git.internal/gitops/{tenant}.git'`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if gatewayDir != "" && gateway.Domain == "" {
				return usageErr(errors.New("--gateway-dir needs --gateway-domain"))
			}
			opts := in.options(cmd, "")
			rep, err := generator.Generate(cmd.Context(), opts)
			printReport(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep)
			if err != nil {
				return err
			}
			if gatewayDir != "" {
				// The tenants' limits go with the gateway's install (its --limits-tenants).
				if gateway.TenantLimits, err = limits.TenantFilesWithLimits(opts.TenantsDir); err != nil {
					return err
				}
			}
			return writeGateway(cmd, gatewayDir, gateway, apiOpts, opts.DryRun)
		},
	}
	f := cmd.Flags()
	in.registerRender(f)
	f.BoolVar(&in.opts.DryRun, "dry-run", false, "write nothing; show a unified diff of what would change per tenant")
	f.StringVar(&gatewayDir, "gateway-dir", "", "also write the gateway's install manifests (as `gateway manifests` prints them) into this folder of the operator's repository")
	f.StringVar(&gateway.Domain, "gateway-domain", "", "the gateway's domain (--gateway-dir)")
	registerInstallFlags(f, &gateway, "gateway-")
	registerAPIInstallFlags(f, &apiOpts, "api-")
	return cmd
}

// printReport prints the recipes' warnings (stderr), then per tenant its line and, in a dry
// run, its diffs.
func printReport(w, stderr io.Writer, rep *generator.Report) {
	if rep == nil {
		return
	}
	for _, warning := range rep.Warnings {
		fmt.Fprintln(stderr, "warning:", warning)
	}
	for _, tr := range rep.Tenants {
		fmt.Fprintln(w, tr.Summary(rep.DryRun))
		fmt.Fprint(w, tr.Diff)
	}
}

// writeGateway writes the gateway's install into dir (nothing when dir is empty or on a dry
// run), after every tenant was rendered and committed.
func writeGateway(cmd *cobra.Command, dir string, o install.Options, api apiinstall.Options, dryRun bool) error {
	if dir == "" {
		return nil
	}
	var also []string
	if apiInstallWanted(api) {
		api.Domain, api.Namespace, api.Gateway = o.Domain, o.Namespace, o.Name
		api.GatewayReplicas, api.ArgoCDNamespace, api.VClusterNamespaces = o.Replicas, o.ArgoCDNamespace, o.VClusterNamespaces
		api.NoMeter = o.NoMeter
		if _, err := apiinstall.YAML(api); err != nil {
			return usageErr(fmt.Errorf("--api-*: %w", err))
		}
		also = append(also, apiinstall.File)
	}
	if dryRun {
		if _, err := install.YAML(o); err != nil {
			return usageErr(fmt.Errorf("--gateway-*: %w", err))
		}
		fmt.Fprintf(cmd.OutOrStdout(), "gateway: would write %s (dry run)\n", dir)
		return nil
	}
	changed, err := install.WriteDir(dir, o, also...)
	if err != nil {
		return fmt.Errorf("--gateway-dir %s: %w", dir, err)
	}
	if len(also) > 0 {
		apiChanged, err := apiinstall.WriteFile(dir, api)
		if err != nil {
			return fmt.Errorf("--gateway-dir %s: %w", dir, err)
		}
		changed = changed || apiChanged
	}
	fmt.Fprintf(cmd.OutOrStdout(), "gateway: %s %s\n", dir, map[bool]string{true: "written", false: "unchanged"}[changed])
	return nil
}
