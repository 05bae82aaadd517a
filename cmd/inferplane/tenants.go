package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/generator/inputs"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// tenantAPI is what the tenants commands need of the product API (productapi/client's Client).
type tenantAPI interface {
	Quota(ctx context.Context, tenant string) (apiv1.TenantQuota, error)
	SetQuota(ctx context.Context, tenant string, q apiv1.QuotaChange) (apiv1.TenantChanged, error)
	SetTier(ctx context.Context, tenant string, t apiv1.TierChange) (apiv1.TenantChanged, error)
	TenantHistory(ctx context.Context, tenant string) (apiv1.TenantHistory, error)
}

// newTenantsCmd is `tenants`: a tenant's tier and quota, their changes (the operator's) and
// its history of them, through the product API.
func newTenantsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "tenants",
		Short: "A tenant's tier and quota, and the operator's changes of them (product API)",
		Long: `tenants shows a tenant's tier and quota and what its jobs claim of it, and lets the operator
(a member of the API's admin groups) change the quota or move the tenant to another tier. Each
change is one commit of the inputs as the signed-in operator, with the reason given, and shows
in the tenant's history. They call the product API of the current context (inferplane login):
operators on files edit tenants/<tenant>/tenant.yaml (spec.quota, spec.tier) and commit it
themselves. docs/business.md says what tiers and quotas are.`,
		Example: `  inferplane tenants quota acme
  inferplane tenants set-quota acme --gpu-quota 32 --reason "order 4711: 16 more H100s"
  inferplane tenants set-tier acme h200-dedicated --reason "moves to H200 from May"
  inferplane tenants history acme`,
	}
	cmd.AddCommand(newTenantsQuotaCmd(), newTenantsSetQuotaCmd(), newTenantsSetTierCmd(), newTenantsHistoryCmd())
	return cmd
}

// tenantSession is the current context's API as tenantAPI, and the tenant a command names
// (args[0], else the context's default).
func tenantSession(args []string) (tenantAPI, string, *apiSession, error) {
	s, err := currentSession()
	if err != nil {
		return nil, "", nil, err
	}
	if s == nil {
		return nil, "", nil, errors.New("no current context: the tenants commands call the product API; sign in with `inferplane login URL`")
	}
	api, ok := s.api.(tenantAPI)
	if !ok {
		return nil, "", nil, errors.New("the API client of this context has no tenants operations")
	}
	given := ""
	if len(args) > 0 {
		given = args[0]
	}
	t, err := s.tenant(given)
	return api, t, s, err
}

func newTenantsQuotaCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "quota [TENANT] [-o table|json|yaml]",
		Short: "A tenant's tier and quota, and what its jobs claim of it",
		Long: `quota shows the tenant's tier, its quota (the tier's figures, the tenant's own, and those in
force: each figure the tenant sets replaces the tier's; 0 is no limit), what its jobs claim
(replicas x GPUs per replica), and the node types and models in force. Default tenant: the
context's.`,
		Example: `  inferplane tenants quota
  inferplane tenants quota globex -o yaml`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeTenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			api, tenant, s, err := tenantSession(args)
			if err != nil {
				return err
			}
			q, err := api.Quota(cmd.Context(), tenant)
			if err != nil {
				return s.apiErr(err)
			}
			if out != "table" {
				return printData(cmd.OutOrStdout(), out, q)
			}
			return printQuota(cmd.OutOrStdout(), q)
		},
	}
	registerOutput(cmd, &out, "table", "", "table", "json", "yaml")
	return cmd
}

func newTenantsSetQuotaCmd() *cobra.Command {
	var gpus, jobs, replicas int32
	var reason, out string
	cmd := &cobra.Command{
		Use:   "set-quota TENANT [--gpu-quota N] [--job-quota N] [--replicas-per-job N] --reason TEXT",
		Short: "Change a tenant's own quota figures (the operator's)",
		Long: `set-quota sets the tenant's own quota figures in its tenant.yaml (spec.quota): each one given
replaces the tier's for this tenant, 0 takes the tier's back, the others stay. It is one commit
of the inputs as you, with the reason, and shows in the tenant's history. A quota lowered below
what the tenant runs keeps what runs (nothing is stopped, its VMs may restart) and refuses any
growth (a new job, more replicas) until the tenant is back under it. Only the operator's admin
groups may change a quota.`,
		Example: `  inferplane tenants set-quota acme --gpu-quota 32 --reason "order 4711: 16 more H100s"
  inferplane tenants set-quota acme --gpu-quota 0 --job-quota 4 --reason "back to the tier's GPUs; trial ends"`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeTenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			q := apiv1.QuotaChange{Reason: reason}
			for _, f := range []struct {
				name string
				v    *int32
				dst  **int32
			}{{"gpu-quota", &gpus, &q.GPUs}, {"job-quota", &jobs, &q.Jobs}, {"replicas-per-job", &replicas, &q.ReplicasPerJob}} {
				if cmd.Flags().Changed(f.name) {
					if *f.v < 0 {
						return usageErr(fmt.Errorf("--%s %d: expected 0 (the tier's) or more", f.name, *f.v))
					}
					*f.dst = f.v
				}
			}
			if q.GPUs == nil && q.Jobs == nil && q.ReplicasPerJob == nil {
				return usageErr(errors.New("give at least one of --gpu-quota, --job-quota and --replicas-per-job"))
			}
			if err := oneLine(reason); err != nil {
				return err
			}
			api, tenant, s, err := tenantSession(args)
			if err != nil {
				return err
			}
			res, err := api.SetQuota(cmd.Context(), tenant, q)
			return reportChange(cmd, s, res, err, out)
		},
	}
	f := cmd.Flags()
	f.Int32Var(&gpus, "gpu-quota", 0, "GPUs all the tenant's jobs may claim together (0: the tier's)")
	f.Int32Var(&jobs, "job-quota", 0, "jobs the tenant may have (0: the tier's)")
	f.Int32Var(&replicas, "replicas-per-job", 0, "replicas one job may have (0: the tier's)")
	addReasonFlag(cmd, &reason)
	registerOutput(cmd, &out, "table", "", "table", "json", "yaml")
	return cmd
}

func newTenantsSetTierCmd() *cobra.Command {
	var reason, out string
	cmd := &cobra.Command{
		Use:   "set-tier TENANT TIER --reason TEXT",
		Short: "Move a tenant to another tier (the operator's)",
		Long: `set-tier sets the tenant's spec.tier to another tier of tenants/tiers/: its node types, quota,
key limits and models become the tenant's (the tenant's own narrower lists and quota figures
stay). It is refused, and nothing committed, when the tier does not exist, does not offer the
node types or models the tenant's jobs use, or is narrower than the tenant's own lists. One
commit of the inputs as you, with the reason, shown in the tenant's history. Only the
operator's admin groups may move a tenant.`,
		Example:           `  inferplane tenants set-tier initech h200-dedicated --reason "signed for H200"`,
		Args:              cobra.ExactArgs(2),
		ValidArgsFunction: completeTenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := oneLine(reason); err != nil {
				return err
			}
			api, tenant, s, err := tenantSession(args)
			if err != nil {
				return err
			}
			res, err := api.SetTier(cmd.Context(), tenant, apiv1.TierChange{Tier: args[1], Reason: reason})
			return reportChange(cmd, s, res, err, out)
		},
	}
	addReasonFlag(cmd, &reason)
	registerOutput(cmd, &out, "table", "", "table", "json", "yaml")
	return cmd
}

func newTenantsHistoryCmd() *cobra.Command {
	var out string
	cmd := &cobra.Command{
		Use:   "history [TENANT] [-o table|json|yaml]",
		Short: "A tenant's quota and tier changes: when, who, what and why",
		Long: `history lists the tenant's quota and tier changes, newest first, as the inputs' commits record
them: when, who (the signed-in operator), what changed and the reason given. Default tenant:
the context's.`,
		Example: `  inferplane tenants history acme
  inferplane tenants history acme -o json`,
		Args:              cobra.MaximumNArgs(1),
		ValidArgsFunction: completeTenantArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			api, tenant, s, err := tenantSession(args)
			if err != nil {
				return err
			}
			h, err := api.TenantHistory(cmd.Context(), tenant)
			if err != nil {
				return s.apiErr(err)
			}
			if out != "table" {
				return printData(cmd.OutOrStdout(), out, h)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
			fmt.Fprintln(tw, "WHEN\tAUTHOR\tCHANGE\tREASON\tCOMMIT")
			for _, c := range h.Changes {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", c.When.UTC().Format(time.RFC3339), c.Author, c.Summary, c.Reason, shortCommit(c.Commit))
			}
			return tw.Flush()
		},
	}
	registerOutput(cmd, &out, "table", "", "table", "json", "yaml")
	return cmd
}

// completeTenantArgs completes a tenants command's TENANT, then (set-tier) its TIER, from the
// tenants folder as the other commands complete names.
func completeTenantArgs(cmd *cobra.Command, args []string, prefix string) ([]string, cobra.ShellCompDirective) {
	switch {
	case len(args) == 0:
		return completeTenants(cmd, args, prefix)
	case len(args) == 1 && cmd.Name() == "set-tier":
		return withPrefix(yamlNames(filepath.Join(folderFlag(cmd, "tenants"), inputs.TiersDir)), prefix), cobra.ShellCompDirectiveNoFileComp
	}
	return nil, cobra.ShellCompDirectiveNoFileComp
}

func addReasonFlag(cmd *cobra.Command, p *string) {
	cmd.Flags().StringVar(p, "reason", "", "why, in one line: recorded in the commit and the tenant's history (the customer sees it)")
	_ = cmd.MarkFlagRequired("reason")
}

// oneLine refuses a reason that is empty or more than one line (it becomes a commit trailer).
func oneLine(reason string) error {
	if strings.TrimSpace(reason) == "" || strings.ContainsAny(reason, "\r\n") {
		return usageErr(errors.New("--reason: expected one line saying why"))
	}
	return nil
}

// reportChange prints a quota or tier change: the quota after it (or as data), and the commit
// on stderr.
func reportChange(cmd *cobra.Command, s *apiSession, res apiv1.TenantChanged, err error, out string) error {
	if err != nil {
		return s.apiErr(err)
	}
	w := res.Write
	fmt.Fprintf(cmd.ErrOrStderr(), "%s: committed %s to the inputs", res.Quota.Tenant, shortCommit(w.InputsCommit))
	switch {
	case w.Unchanged:
		fmt.Fprint(cmd.ErrOrStderr(), " (unchanged: nothing to commit)")
	case !w.Rendered:
		fmt.Fprintf(cmd.ErrOrStderr(), "; %s", w.RenderError)
	}
	fmt.Fprintln(cmd.ErrOrStderr())
	if out != "table" {
		return printData(cmd.OutOrStdout(), out, res)
	}
	return printQuota(cmd.OutOrStdout(), res.Quota)
}

// printQuota is a tenant's quota for people.
func printQuota(w io.Writer, q apiv1.TenantQuota) error {
	fig := func(v int32, zero string) string {
		if v == 0 {
			return zero
		}
		return strconv.Itoa(int(v))
	}
	fmt.Fprintf(w, "%-12s%s\n%-12s%s\n\n", "Tenant:", q.Tenant, "Tier:", q.Tier)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "QUOTA\tGPUS\tJOBS\tREPLICAS/JOB")
	for _, r := range []struct {
		name string
		q    apiv1.Quota
		zero string
	}{{"tier", q.TierQuota, "-"}, {"tenant", q.Own, "(tier's)"}, {"in force", q.InForce, "no limit"}} {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", r.name, fig(r.q.GPUs, r.zero), fig(r.q.Jobs, r.zero), fig(r.q.ReplicasPerJob, r.zero))
	}
	fmt.Fprintf(tw, "used\t%d\t%d\t\n", q.UsedGPUs, len(q.Jobs))
	if err := tw.Flush(); err != nil {
		return err
	}
	jobs := make([]string, len(q.Jobs))
	for i, j := range q.Jobs {
		jobs[i] = fmt.Sprintf("%s %d GPUs", j.Name, j.GPUs)
		if j.Replicas > 0 && j.GPUs%int64(j.Replicas) == 0 {
			jobs[i] = fmt.Sprintf("%s %dx%d", j.Name, j.Replicas, j.GPUs/int64(j.Replicas))
		}
	}
	fmt.Fprintln(w)
	if len(jobs) > 0 {
		fmt.Fprintf(w, "%-12s%s (replicas x GPUs each)\n", "Jobs:", strings.Join(jobs, ", "))
	}
	if q.Over {
		fmt.Fprintf(w, "%-12s%s\n", "Over:", "the jobs claim more than the quota in force: what runs is kept, no job may grow")
	}
	nts := "every node type"
	if q.AllowedNodeTypes != nil {
		nts = "[" + strings.Join(q.AllowedNodeTypes, ", ") + "]"
	}
	models := "every model"
	if q.Models != nil {
		models = strings.Join(q.Models, ", ")
	}
	_, err := fmt.Fprintf(w, "%-12s%s\n%-12s%s\n", "Node types:", nts, "Models:", models)
	return err
}
