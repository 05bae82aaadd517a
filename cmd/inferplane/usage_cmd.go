package main

import (
	"cmp"
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/metering"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
)

// usageAPI is what `inferplane usage` calls.
type usageAPI interface {
	Usage(ctx context.Context, tenant string, q apiclient.UsageQuery) (apiv1.Usage, error)
}

func newUsageCmd() *cobra.Command {
	var q apiclient.UsageQuery
	var out string
	cmd := &cobra.Command{
		Use:   "usage [TENANT] [--from TIME] [--to TIME] [--group-by job|model|key|day|nodeType|tier] [-o table|json|csv]",
		Short: "A tenant's GPU-hours beside its tokens, and what its quota leaves (product API)",
		Long: `usage shows what the meter recorded for the tenant over a period: the GPU-seconds its VMs
held their GPUs (and GPU-hours), the requests and tokens of its API keys, grouped by job, model,
key, day, node type or tier; then what the tenant's quota leaves (GPUs and jobs in force against
what its jobs claim). The hours of a VM still running count up to now (the open part, recorded
once the hour ends). Times are a duration back from now (30d is not one: write 720h) or an RFC
3339 time; the period is whole UTC hours. It calls the product API of the current context
(inferplane login), which reads the meter (api serve --meter); docs/business.md says what is
metered. -o csv prints one row per group with a header, for a spreadsheet or an invoice run.`,
		Example: `  inferplane usage
  inferplane usage acme --from 2026-05-01T00:00:00Z --to 2026-06-01T00:00:00Z --group-by job
  inferplane usage --from 168h --group-by day -o csv > week.csv
  inferplane usage globex --group-by key -o json`,
		Args: cobra.MaximumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if q.GroupBy != "" && !slices.Contains(metering.GroupBys, q.GroupBy) {
				return usageErr(fmt.Errorf("--group-by %q: expected one of %s", q.GroupBy, strings.Join(metering.GroupBys, ", ")))
			}
			s, err := currentSession()
			if err != nil {
				return err
			}
			if s == nil {
				return errors.New("no current context: usage calls the product API; sign in with `inferplane login URL`")
			}
			api, ok := s.api.(usageAPI)
			if !ok {
				return errors.New("the API client of this context has no usage operation")
			}
			given := ""
			if len(args) > 0 {
				given = args[0]
			}
			tenant, err := s.tenant(given)
			if err != nil {
				return err
			}
			u, err := api.Usage(cmd.Context(), tenant, q)
			if err != nil {
				return s.apiErr(err)
			}
			if u.Metered == nil {
				return errors.New("the API server knows no meter (api serve --meter): no GPU-seconds to show; keys usage shows the keys' tokens")
			}
			switch out {
			case "json":
				return printData(cmd.OutOrStdout(), out, u)
			case "csv":
				return printUsageCSV(cmd.OutOrStdout(), u)
			}
			return printUsage(cmd.OutOrStdout(), u)
		},
	}
	fl := cmd.Flags()
	fl.StringVar(&q.From, "from", "720h", "start of the period: a duration back from now or an RFC 3339 time")
	fl.StringVar(&q.To, "to", "", "end of the period: an RFC 3339 time (default now)")
	fl.StringVar(&q.GroupBy, "group-by", "", "group by job, model, key, day, nodeType or tier (default: one row, the total)")
	registerOutput(cmd, &out, "table", "", "table", "json", "csv")
	return cmd
}

var usageColumns = []string{"key", "gpuSeconds", "gpuHours", "requests", "tokensIn", "tokensOut"}

func usageRow(g apiv1.UsageGroup) []string {
	return []string{g.Key, strconv.FormatUint(g.GPUSeconds, 10), strconv.FormatFloat(g.GPUHours, 'f', 3, 64),
		strconv.FormatUint(g.Requests, 10), strconv.FormatUint(g.TokensIn, 10), strconv.FormatUint(g.TokensOut, 10)}
}

// printUsageCSV writes one row per group, then the total (key "total").
func printUsageCSV(w io.Writer, u apiv1.Usage) error {
	cw := csv.NewWriter(w)
	head := append([]string{"tenant", "from", "to", "groupBy"}, usageColumns...)
	_ = cw.Write(head)
	m := u.Metered
	lead := []string{u.Tenant, m.From.UTC().Format("2006-01-02T15:04:05Z"), m.To.UTC().Format("2006-01-02T15:04:05Z"), m.GroupBy}
	for _, g := range m.Groups {
		_ = cw.Write(append(slices.Clone(lead), usageRow(g)...))
	}
	total := m.Total
	total.Key = "total"
	_ = cw.Write(append(slices.Clone(lead), usageRow(total)...))
	cw.Flush()
	return cw.Error()
}

func printUsage(w io.Writer, u apiv1.Usage) error {
	m := u.Metered
	fmt.Fprintf(w, "tenant %s, %s to %s (UTC hours)\n", u.Tenant, m.From.UTC().Format("2006-01-02T15:04Z"), m.To.UTC().Format("2006-01-02T15:04Z"))
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tGPU-HOURS\tGPU-SECONDS\tREQUESTS\tTOKENS IN\tTOKENS OUT\n", strings.ToUpper(cmp.Or(m.GroupBy, "total")))
	rows := m.Groups
	if m.GroupBy != "" {
		rows = append(slices.Clone(rows), apiv1.UsageGroup{Key: "total", GPUSeconds: m.Total.GPUSeconds, GPUHours: m.Total.GPUHours, Counts: m.Total.Counts})
	} else {
		rows = []apiv1.UsageGroup{m.Total}
		rows[0].Key = "total"
	}
	for _, g := range rows {
		fmt.Fprintf(tw, "%s\t%.3f\t%d\t%d\t%d\t%d\n", dashIfEmpty(g.Key), g.GPUHours, g.GPUSeconds, g.Requests, g.TokensIn, g.TokensOut)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if m.OpenGPUSeconds > 0 {
		fmt.Fprintf(w, "of which %d GPU-seconds run now and are not recorded yet (through %s)\n", m.OpenGPUSeconds, m.Through.UTC().Format("2006-01-02T15:04:05Z"))
	}
	if q := u.Quota; q != nil {
		fmt.Fprintf(w, "quota (tier %s): GPUs %s, jobs %s\n", q.Tier, leftOf(q.UsedGPUs, q.GPUs, q.LeftGPUs), leftOf(q.UsedJobs, q.Jobs, q.LeftJobs))
	}
	return nil
}

// leftOf says "used of quota, left left", or "used (no limit)".
func leftOf(used int64, quota int32, left *int64) string {
	if left == nil || quota == 0 {
		return fmt.Sprintf("%d used (no limit)", used)
	}
	return fmt.Sprintf("%d of %d used, %d left", used, quota, *left)
}
