package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/internal/suggest"
	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/usage"
)

func newHealthCmd() *cobra.Command {
	var tenant, server, output string
	cmd := &cobra.Command{
		Use:   "health [--tenant T] [--server URL] [-o table|json|yaml]",
		Short: "Show each endpoint's status, success rate and latency",
		Long: `Reads endpoint health from a running xDS server (` + usage.HealthPath + `): per endpoint its status
(healthy, degraded, unavailable), ready replicas, requests, success rate and latency p50/p99
over the server's window (5 minutes by default), from Envoy's access logs and the replica
probes. Exits 1 when an endpoint shown is unavailable, so scripts can gate on it, and when
--tenant names a tenant the server knows no endpoint of.`,
		Example: `  # Every endpoint the local xDS server knows
  inferplane health

  # One tenant's endpoints, from a server elsewhere, as JSON
  inferplane health --tenant acme --server http://10.0.0.5:9090 -o json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			rep, err := gateway.Client{BaseURL: server}.Health(cmd.Context(), tenant)
			if err != nil {
				return gatewayErr(err)
			}
			if tenant != "" && len(rep.Endpoints) == 0 {
				return unknownTenant(cmd, server, tenant)
			}
			if output != "table" {
				if err := printData(cmd.OutOrStdout(), output, rep); err != nil {
					return err
				}
			} else if err := healthTable(cmd, rep); err != nil {
				return err
			}
			var down []string
			for _, e := range rep.Endpoints {
				if e.Status == usage.StatusUnavailable {
					down = append(down, e.Tenant+"/"+e.Job)
				}
			}
			if len(down) > 0 {
				return &exitStatus{code: 1, err: fmt.Errorf("unavailable: %s", strings.Join(down, ", "))}
			}
			return nil
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&tenant, "tenant", "", "tenant whose endpoints to show (default: every tenant's)")
	addServerFlag(fl, &server)
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants)
	return cmd
}

// unknownTenant is the error for a tenant the server knows no endpoint of, naming the tenants it
// does know.
func unknownTenant(cmd *cobra.Command, server, tenant string) error {
	all, err := gateway.Client{BaseURL: server}.Health(cmd.Context(), "")
	if err != nil {
		return gatewayErr(err)
	}
	known := map[string]bool{}
	for _, e := range all.Endpoints {
		known[e.Tenant] = true
	}
	names := slices.Sorted(maps.Keys(known))
	return fmt.Errorf("unknown tenant %q: the server knows no endpoint of it (tenants with endpoints: %s)%s",
		tenant, orNone(names), suggest.DidYouMean(suggest.Close(tenant, names)))
}

func healthTable(cmd *cobra.Command, rep usage.HealthReport) error {
	out := cmd.OutOrStdout()
	if len(rep.Endpoints) == 0 {
		_, err := fmt.Fprintln(out, "no endpoints known to the server")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "TENANT\tENDPOINT\tSTATUS\tREPLICAS\tREQUESTS (%s)\tSUCCESS\tP50\tP99\tDETAIL\n", rep.Window)
	for _, e := range rep.Endpoints {
		replicas := "-"
		if e.Replicas != nil {
			replicas = fmt.Sprintf("%d/%d", e.Replicas.Ready, e.Replicas.Total)
		}
		success := "-"
		if e.SuccessRate != nil {
			success = fmt.Sprintf("%.1f%%", 100**e.SuccessRate)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", e.Tenant, e.Job, e.Status, replicas, e.Requests,
			success, fmtMs(e.LatencyP50Ms), fmtMs(e.LatencyP99Ms), strings.Join(e.Reasons, "; "))
	}
	return tw.Flush()
}

func fmtMs(v *float64) string {
	switch {
	case v == nil:
		return "-"
	case *v >= 10_000:
		return fmt.Sprintf("%.0fs", *v/1000)
	case *v >= 1000:
		return fmt.Sprintf("%.1fs", *v/1000)
	default:
		return fmt.Sprintf("%.0fms", *v)
	}
}
