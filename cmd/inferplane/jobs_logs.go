package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
	"github.com/inferplane/inferplane/usage"
)

// logsFlags are jobs logs' flags, kubectl logs' names.
type logsFlags struct {
	follow        bool
	replica, node int32
	since         string
	sinceTime     string
	tail          int64
	search        string
	timestamps    bool
	output        string
}

func newJobsLogsCmd() *cobra.Command {
	var (
		in inputFlags
		cf clusterFlags
		f  logsFlags
	)
	cmd := &cobra.Command{
		Use:   "logs <tenant>/<job> [-f] [--replica N] [--node N] [--since 10m | --since-time T] [--tail N] [--search TEXT] [--timestamps] [-o json]",
		Short: "Show what a job's model servers print, and follow it",
		Long: `logs shows what the model server of each VM of the job prints, as the inference agent in the
VM forwards it, and the agent's word when a VM's stage changes (pulling the image, downloading
the weights, loading, serving, crash-looping with the exit code and the last line). Each line
is tagged with its replica and node ([r1/n0]); the VMs' lines are merged by time.

The lines come from each VM's serial console, which KubeVirt's guest-console-log container of
the VM's virt-launcher pod prints, read through the tenant cluster's API server (pods/log), so
kubectl logs <virt-launcher pod> -c guest-console-log shows the same records.

Flags are kubectl logs' names: -f/--follow keeps reading new lines (and VM instances started
later: a restart) until Ctrl-C; --tail starts from each VM's last N console lines (default 100;
-1 all; all by default with --since or --since-time); --since 10m or --since-time
2026-12-03T07:00:00Z leave out older lines; --replica and --node narrow to one replica or node
rank; --search keeps the lines that contain the text, ignoring case (stage changes and notices
are always shown); --timestamps prefixes each line with its time. -o json prints one JSON
object per line, the API's own shape (docs/logs.md).`,
		Example: `  inferplane jobs logs acme/chat
  inferplane jobs logs acme/chat -f --replica 1
  inferplane jobs logs acme/chat --since 10m --search error
  inferplane jobs logs acme/chat --tail -1 -o json | jq -r 'select(.kind == "line") | .line'`,
		Args:              oneJob,
		ValidArgsFunction: completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, job, err := jobArg(args[0])
			if err != nil {
				return err
			}
			return runJobsLogs(cmd, &in, &cf, &f, tenant, job)
		},
	}
	in.register(cmd.Flags())
	cf.register(cmd)
	for _, name := range []string{"server", "domain"} {
		_ = cmd.Flags().MarkHidden(name) // the gateway is not asked
	}
	fs := cmd.Flags()
	fs.BoolVarP(&f.follow, "follow", "f", false, "keep reading new lines until interrupted")
	fs.Int32Var(&f.replica, "replica", -1, "only this replica (0, 1, ...); default all")
	fs.Int32Var(&f.node, "node", -1, "only this node rank of each replica (0 is the head); default all")
	fs.StringVar(&f.since, "since", "", "from this long ago (10m) or this RFC 3339 time: leave out older lines")
	fs.StringVar(&f.sinceTime, "since-time", "", "an RFC 3339 time: leave out older lines")
	fs.Int64Var(&f.tail, "tail", 100, "start from each VM's last N console lines (-1: all; with --since or --since-time, all unless given)")
	fs.StringVar(&f.search, "search", "", "only the lines that contain this text, ignoring case")
	fs.BoolVar(&f.timestamps, "timestamps", false, "prefix each line with its time (RFC 3339)")
	registerOutput(cmd, &f.output, "", "each line with its replica and node", "json")
	return cmd
}

// check refuses flags that contradict each other, as usage errors.
func (f *logsFlags) check() error {
	if f.since != "" && f.sinceTime != "" {
		return usageErr(errors.New("--since and --since-time: give one"))
	}
	if f.sinceTime != "" {
		if _, err := time.Parse(time.RFC3339, f.sinceTime); err != nil {
			return usageErr(fmt.Errorf("--since-time %q: expected an RFC 3339 time such as 2026-12-03T07:00:00Z", f.sinceTime))
		}
	}
	if _, err := usage.ParseSince(f.since, time.Now()); err != nil {
		return usageErr(fmt.Errorf("--since: %w", err))
	}
	if f.tail < -1 {
		return usageErr(fmt.Errorf("--tail %d: expected a number of lines, or -1 for all", f.tail))
	}
	if f.replica < -1 || f.node < -1 {
		return usageErr(errors.New("--replica and --node: expected 0 or more"))
	}
	return nil
}

// sinceText is the one of --since and --since-time given.
func (f *logsFlags) sinceText() string {
	if f.sinceTime != "" {
		return f.sinceTime
	}
	return f.since
}

// tailOf is --tail when given, else nil (the default: 100 lines, all with a since).
func (f *logsFlags) tailOf(cmd *cobra.Command) *int64 {
	if cmd.Flags().Changed("tail") {
		return &f.tail
	}
	return nil
}

func pick(n int32) *int32 {
	if n < 0 {
		return nil
	}
	return &n
}

// runJobsLogs is jobs logs on the operator's files and clusters: the tenant's cluster from
// the kubeconfig or the registry, as jobs detail reaches it.
func runJobsLogs(cmd *cobra.Command, in *inputFlags, cf *clusterFlags, f *logsFlags, tenant, job string) error {
	if err := f.check(); err != nil {
		return err
	}
	tp, jp, err := in.planJob(cmd, tenant, job)
	if err != nil {
		return err
	}
	if n := jp.Job.Spec.Replicas; f.replica >= n {
		return usageErr(fmt.Errorf("--replica %d: the job has %s", f.replica, replicaNumbers(n)))
	}
	if n := max(jp.NodesPerReplica, 1); f.node >= n {
		return usageErr(fmt.Errorf("--node %d: each replica of the job has %s (0 to %d)", f.node, count(n, "node"), n-1))
	}
	t := jobstatus.Tenant(tp)
	cfg, err := cf.access().Tenant(cmd.Context(), t.Name, t.Cluster)
	if err != nil {
		return fmt.Errorf("%w%s", err, clusterHint(err))
	}
	kube, err := joblogs.NewKube(cfg)
	if err != nil {
		return fmt.Errorf("cluster of tenant %s (%s): %w", t.Name, cfg.Host, err)
	}
	q := joblogs.Query{Namespace: t.Namespace, Tenant: tenant, Job: job, Follow: f.follow, Replica: pick(f.replica), Node: pick(f.node), Search: f.search, Tail: 100}
	q.Since, _ = usage.ParseSince(f.sinceText(), time.Now()) // checked above
	switch tail := f.tailOf(cmd); {
	case tail != nil:
		q.Tail = *tail
	case !q.Since.IsZero():
		q.Tail = -1
	}
	p := &logPrinter{w: cmd.OutOrStdout(), json: f.output == "json", timestamps: f.timestamps}
	err = (&joblogs.Reader{Cluster: kube}).Stream(cmd.Context(), q, func(e joblogs.Entry) error { return p.print(productapi.LogEntry(e)) })
	if err != nil {
		return fmt.Errorf("cluster of tenant %s (%s): %w", t.Name, cfg.Host, err)
	}
	return nil
}

// apiJobsLogsCmd is jobs logs through the product API.
func apiJobsLogsCmd(cmd *cobra.Command, s *apiSession, args []string) error {
	t, j, err := s.tenantJob(args)
	if err != nil {
		return err
	}
	var f logsFlags
	fs := cmd.Flags()
	f.follow, _ = fs.GetBool("follow")
	f.replica, _ = fs.GetInt32("replica")
	f.node, _ = fs.GetInt32("node")
	f.since, f.sinceTime, f.search = flagString(fs, "since"), flagString(fs, "since-time"), flagString(fs, "search")
	f.tail, _ = fs.GetInt64("tail")
	f.timestamps, _ = fs.GetBool("timestamps")
	f.output = flagString(fs, "output")
	if err := f.check(); err != nil {
		return err
	}
	q := apiclient.LogQuery{Replica: pick(f.replica), Node: pick(f.node), Follow: f.follow, Since: f.sinceText(), Tail: f.tailOf(cmd), Search: f.search}
	return s.jobsLogs(cmd.Context(), &logPrinter{w: cmd.OutOrStdout(), json: f.output == "json", timestamps: f.timestamps}, t, j, q)
}

// jobsLogs is jobs logs through the API: following, until ctx ends (Ctrl-C), which is no
// error.
func (s *apiSession) jobsLogs(ctx context.Context, p *logPrinter, tenant, job string, q apiclient.LogQuery) error {
	err := s.api.Logs(ctx, tenant, job, q, p.print)
	if err != nil && ctx.Err() != nil {
		return nil
	}
	return s.apiErr(err)
}

// logPrinter prints log entries: for people, one line each with its VM's replica and node
// (a stage change and a notice in parentheses), control characters shown as escapes so that
// a line cannot move the terminal's cursor or change its colours; or, with json, as the API
// sends them, one object per line.
type logPrinter struct {
	w          io.Writer
	json       bool
	timestamps bool
}

func (p *logPrinter) print(e apiv1.LogEntry) error {
	if p.json {
		b, err := json.Marshal(e)
		if err != nil {
			return err
		}
		_, err = p.w.Write(append(b, '\n'))
		return err
	}
	var b strings.Builder
	if p.timestamps {
		b.WriteString(e.Time.UTC().Format(time.RFC3339Nano) + " ")
	}
	if e.Replica != nil && e.Node != nil {
		fmt.Fprintf(&b, "[r%d/n%d] ", *e.Replica, *e.Node)
	}
	switch e.Kind {
	case "line":
		if e.Stream == string(guestlog.Agent) {
			b.WriteString("(agent) ")
		}
		b.WriteString(printable(e.Line))
		if e.Truncated {
			b.WriteString(" [cut: longer than the agent forwards]")
		}
	default:
		b.WriteString("(" + e.Kind + ") " + printable(e.Message))
	}
	b.WriteByte('\n')
	_, err := io.WriteString(p.w, b.String())
	return err
}

// printable shows control characters other than tab as Go escapes (\x1b, \r).
func printable(s string) string {
	if !strings.ContainsFunc(s, isControl) {
		return s
	}
	var b strings.Builder
	for _, r := range s {
		if isControl(r) {
			q := fmt.Sprintf("%+q", string(r))
			b.WriteString(q[1 : len(q)-1])
			continue
		}
		b.WriteRune(r)
	}
	return b.String()
}

func isControl(r rune) bool { return (r < 0x20 && r != '\t') || r == 0x7f || (r >= 0x80 && r < 0xa0) }
