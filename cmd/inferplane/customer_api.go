package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/productapi/apiv1"
	apiclient "github.com/inferplane/inferplane/productapi/client"
	"github.com/inferplane/inferplane/productapi/clientconfig"
	"github.com/inferplane/inferplane/productapi/signin"
)

// customerAPI is what the customer's commands (jobs, keys, usage, health, models) need from
// the product API: productapi/client's Client, behind this interface so each command's
// rendering is tested apart from the network.
type customerAPI interface {
	ListJobs(ctx context.Context, tenant string) (apiv1.JobList, error)
	GetJob(ctx context.Context, tenant, job string) (apiv1.JobDetail, error)
	CreateJob(ctx context.Context, tenant string, job apiv1.JobCreate, o apiclient.WriteOptions) (apiv1.JobWritten, error)
	SetReplicas(ctx context.Context, tenant, job string, replicas int32) (apiv1.JobWritten, error)
	RestartJob(ctx context.Context, tenant, job string, replica int32, o apiclient.WriteOptions) (apiv1.Restarted, error)
	DeleteJob(ctx context.Context, tenant, job string) (apiv1.JobDeleted, error)
	Logs(ctx context.Context, tenant, job string, q apiclient.LogQuery, each func(apiv1.LogEntry) error) error
	ListModels(ctx context.Context, tenant string) (apiv1.ModelList, error)
	ListKeys(ctx context.Context, tenant string) (apiv1.KeyList, error)
	CreateKey(ctx context.Context, tenant string, k apiv1.KeyCreate, o apiclient.WriteOptions) (apiv1.KeyCreated, error)
	RevokeKey(ctx context.Context, tenant, id string) (apiv1.Key, error)
	SetKeyLimits(ctx context.Context, tenant, id string, l *v1alpha1.RateLimits) (apiv1.Key, error)
	Usage(ctx context.Context, tenant string, q apiclient.UsageQuery) (apiv1.Usage, error)
	Endpoints(ctx context.Context, tenant string) (apiv1.EndpointList, error)
	Me(ctx context.Context) (apiv1.Me, error)
}

var _ customerAPI = (*apiclient.Client)(nil)

// apiSession is the current context and a client of its server, signed in with its tokens.
type apiSession struct {
	api     customerAPI
	context clientconfig.Context
}

// currentSession is the session of the current context; nil when there is none (the
// commands then work on the operator's files).
func currentSession() (*apiSession, error) {
	store, cfg, err := loadContexts()
	if err != nil {
		return nil, err
	}
	c, ok := cfg.Current()
	if !ok {
		return nil, nil
	}
	cl := apiclient.New(c.Server, store.TokenSource(c, signin.Refresher(nil), nil))
	return &apiSession{api: cl, context: c}, nil
}

// useAPI says whether a customer command calls the API: a current context exists and the
// command was not pointed at the operator's files (--tenants).
func useAPI(cmd *cobra.Command) (*apiSession, error) {
	if f := cmd.Flags().Lookup("tenants"); f != nil && f.Changed {
		return nil, nil
	}
	return currentSession()
}

// tenant is the tenant a command acts on: the one given, else the context's default.
func (s *apiSession) tenant(given string) (string, error) {
	if given != "" {
		return given, nil
	}
	if s.context.Tenant != "" {
		return s.context.Tenant, nil
	}
	return "", usageErr(fmt.Errorf("which tenant? pass --tenant, or set the context's default: inferplane config set-context %s --tenant T", s.context.Name))
}

// apiErr words an API error for the terminal: the problem's status, detail and each field's
// message as generate words it; a 401 says how to sign in again.
func (s *apiSession) apiErr(err error) error {
	var e *apiclient.Error
	if errors.As(err, &e) && e.Status == http.StatusUnauthorized {
		return fmt.Errorf("%w\nsign in again: inferplane login %s", err, s.context.Server)
	}
	var nsi *clientconfig.NotSignedInError
	if errors.As(err, &nsi) {
		return err
	}
	if err != nil && !errors.As(err, &e) {
		return fmt.Errorf("the product API at %s (context %s): %w", s.context.Server, s.context.Name, err)
	}
	return err
}

func newIdempotencyKey() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func agoText(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return now.Sub(*t).Round(time.Second).String()
}

func dashIfEmpty(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// printList prints a list the API answered: as data (-o json|yaml, the API's own shape), one
// name per item (-o name), or a table of header and each item's rows.
func printList[T any](w io.Writer, output string, data any, items []T, name func(T) string, header string, rows func(T) []string) error {
	switch output {
	case "json", "yaml":
		return printData(w, output, data)
	case "name":
		for _, it := range items {
			fmt.Fprintln(w, name(it))
		}
		return nil
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, header)
	for _, it := range items {
		for _, r := range rows(it) {
			fmt.Fprintln(tw, r)
		}
	}
	return tw.Flush()
}

// jobsList is `jobs list` through the API.
func (s *apiSession) jobsList(ctx context.Context, w io.Writer, tenant, output string) error {
	l, err := s.api.ListJobs(ctx, tenant)
	if err != nil {
		return s.apiErr(err)
	}
	now := time.Now()
	return printList(w, output, l, l.Items, func(j apiv1.Job) string { return j.Tenant + "/" + j.Name },
		"JOB\tMODEL\tNODE TYPE\tREPLICAS\tGPUS/REPLICA\tSTAGE\tSINCE\tREASON", func(j apiv1.Job) []string {
			return []string{fmt.Sprintf("%s/%s\t%s\t%s\t%d\t%d\t%s\t%s\t%s", j.Tenant, j.Name, j.Model, j.NodeType, j.Replicas, j.GPUsPerReplica, j.Stage, agoText(j.Since, now), j.Reason)}
		})
}

// jobsDetail is `jobs detail` through the API, with its exit status: 0 serving, 3 on its way,
// 4 failed. With wait.wait it follows the job first (waitForJob).
func (s *apiSession) jobsDetail(ctx context.Context, w, errOut io.Writer, tenant, job, output string, wait waitFlags) error {
	var d apiv1.JobDetail
	var err error
	if wait.wait {
		d, err = s.waitForJob(ctx, errOut, tenant, job, wait.timeout)
	} else {
		d, err = s.api.GetJob(ctx, tenant, job)
	}
	if err != nil {
		return s.apiErr(err)
	}
	if output == "json" || output == "yaml" {
		if err := printData(w, output, d); err != nil {
			return err
		}
	} else {
		printAPIJobDetail(w, d, time.Now())
	}
	switch d.Stage {
	case "serving":
		return nil
	case "failed", "crash-looping":
		return &exitStatus{code: exitFailed, err: fmt.Errorf("%s/%s %s: %s", tenant, job, d.Stage, d.Reason)}
	}
	if wait.wait {
		return &exitStatus{code: exitOnItsWay, err: fmt.Errorf("%s/%s: still %s after %s (--wait-timeout)", tenant, job, d.Stage, wait.timeout)}
	}
	return &exitStatus{code: exitOnItsWay, err: fmt.Errorf("%s/%s is not serving yet (%s)", tenant, job, d.Stage)}
}

// waitForJob follows the job until it serves or fails, or timeout passes, saying on errOut
// each time its stage or reason changes (as jobs detail --wait does on the operator's files).
func (s *apiSession) waitForJob(ctx context.Context, errOut io.Writer, tenant, job string, timeout time.Duration) (apiv1.JobDetail, error) {
	return jobstatus.Wait(ctx, waitInterval, timeout,
		func(ctx context.Context) (apiv1.JobDetail, error) { return s.api.GetJob(ctx, tenant, job) },
		func(d apiv1.JobDetail) (lifecycle.Stage, string) { return lifecycle.Stage(d.Stage), d.Reason },
		func(d apiv1.JobDetail) { sayStage(errOut, tenant, job, d.Stage, d.Reason) })
}

func printAPIJobDetail(w io.Writer, d apiv1.JobDetail, now time.Time) {
	fmt.Fprintf(w, "Job:        %s/%s\n", d.Tenant, d.Name)
	fmt.Fprintf(w, "Stage:      %s", d.Stage)
	if d.Since != nil {
		fmt.Fprintf(w, " since %s (%s ago)", d.Since.UTC().Format(time.RFC3339), agoText(d.Since, now))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "Reason:     %s\n", dashIfEmpty(d.Reason))
	ep := dashIfEmpty(d.Endpoint)
	if d.Endpoint != "" && d.RequireAPIKey {
		ep += " (API key required)"
	}
	fmt.Fprintf(w, "Endpoint:   %s\n", ep)
	fmt.Fprintf(w, "Master:     %s: %s (%s); %d GPU per replica: %d node(s) of %s\n", d.Master.Name, d.Model, d.Runtime, d.Master.PerReplicaGPUCount, d.NodesPerReplica, d.NodeType)
	if d.Master.Image != "" {
		fmt.Fprintf(w, "Image:      %s\n", d.Master.Image)
	}
	if len(d.Master.Args) > 0 {
		fmt.Fprintf(w, "Serve args: %s\n", strings.Join(d.Master.Args, " "))
	}
	if a := d.Application; a != nil {
		fmt.Fprintf(w, "Argo CD:    Application %s: %s, %s, revision %s\n", a.Name, a.Sync, dashIfEmpty(a.Health), dashIfEmpty(a.Revision))
	}
	switch {
	case d.Gateway != nil && d.Gateway.Known:
		fmt.Fprintf(w, "Gateway:    %s, %d of %d replicas in rotation\n", d.Gateway.Status, d.Gateway.Ready, d.Gateway.Total)
	case d.GatewayError != "":
		fmt.Fprintf(w, "Gateway:    not read: %s\n", d.GatewayError)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tSTAGE\tSINCE\tNODES\tNODE NAMES\tPHASE\tIPS\tREASON")
	for _, r := range d.ReplicaList {
		var names, phases, ips []string
		for _, n := range r.Nodes {
			names = append(names, dashIfEmpty(n.Node))
			phases = append(phases, dashIfEmpty(n.Phase))
			ips = append(ips, n.IPs...)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Replica, r.Stage, agoText(r.Since, now), len(r.Nodes),
			dashIfEmpty(strings.Join(names, ",")), dashIfEmpty(strings.Join(phases, ",")), dashIfEmpty(strings.Join(ips, ",")), r.Reason)
	}
	tw.Flush()
}

// jobsCreate is `jobs create` through the API: one commit of the inputs as the caller; a
// retry of this command with the same key would write once.
func (s *apiSession) jobsCreate(ctx context.Context, w, errOut io.Writer, tenant string, job apiv1.JobCreate, output string) error {
	res, err := s.api.CreateJob(ctx, tenant, job, apiclient.WriteOptions{IdempotencyKey: newIdempotencyKey()})
	if err != nil {
		return s.apiErr(err)
	}
	if output == "json" || output == "yaml" {
		return printData(w, output, res)
	}
	j := res.Job
	fmt.Fprintf(w, "created %s/%s: %s, %d replica(s) x %d GPU of %s; inputs commit %s\n", j.Tenant, j.Name, j.Model, j.Replicas, j.GPUsPerReplica, j.NodeType, shortCommit(res.Write.InputsCommit))
	printAPIWrite(errOut, res.Write)
	if j.Endpoint != "" {
		fmt.Fprintf(w, "endpoint: %s (follow it: inferplane jobs detail %s/%s)\n", j.Endpoint, j.Tenant, j.Name)
	}
	return nil
}

func printAPIWrite(errOut io.Writer, wr apiv1.Write) {
	switch {
	case wr.RenderError != "":
		fmt.Fprintf(errOut, "warning: %s\n", wr.RenderError)
	case wr.TenantCommit != "":
		fmt.Fprintf(errOut, "the tenant's repository: commit %s\n", shortCommit(wr.TenantCommit))
	}
}

func shortCommit(commit string) string {
	if len(commit) > 12 {
		return commit[:12]
	}
	return commit
}

// jobsRestart is `jobs restart` through the API (replica < 0: every replica).
func (s *apiSession) jobsRestart(ctx context.Context, w io.Writer, tenant, job string, replica int32) error {
	res, err := s.api.RestartJob(ctx, tenant, job, replica, apiclient.WriteOptions{IdempotencyKey: newIdempotencyKey()})
	if err != nil {
		return s.apiErr(err)
	}
	for _, vm := range res.VMs {
		fmt.Fprintf(w, "restarted %s/%s: VM %s (%s)\n", res.Tenant, res.Job, vm.VM, vm.How)
	}
	return nil
}

// jobsDelete is `jobs delete` through the API. The keys limited to the job's endpoint are
// read first, so that with revokeKeys a key list that cannot be read deletes nothing; after
// the delete they are revoked (revokeKeys) or named as still active.
func (s *apiSession) jobsDelete(ctx context.Context, w, errOut io.Writer, tenant, job string, revokeKeys bool) error {
	var ids []string
	l, keysErr := s.api.ListKeys(ctx, tenant)
	if keysErr != nil && revokeKeys {
		return fmt.Errorf("--revoke-keys: %w (nothing was deleted)", s.apiErr(keysErr))
	}
	if keysErr == nil {
		for _, k := range l.Items {
			if k.Endpoint == job && k.Status == "active" {
				ids = append(ids, k.ID)
			}
		}
	}
	res, err := s.api.DeleteJob(ctx, tenant, job)
	if err != nil {
		return s.apiErr(err)
	}
	fmt.Fprintf(w, "deleted %s/%s; inputs commit %s\n", res.Tenant, res.Name, shortCommit(res.Write.InputsCommit))
	printAPIWrite(errOut, res.Write)
	switch {
	case keysErr != nil:
		fmt.Fprintf(errOut, "warning: the keys of endpoint %s could not be listed (%v): check them with inferplane keys list\n", job, s.apiErr(keysErr))
	case revokeKeys:
		for _, id := range ids {
			if err := s.keysRevoke(ctx, w, tenant, id); err != nil {
				return err
			}
		}
	case len(ids) > 0:
		keysStayActive(w, tenant+"/"+job, ids)
	}
	return nil
}

// modelsList is `models list` through the API: what the tenant may run.
func (s *apiSession) modelsList(ctx context.Context, w io.Writer, tenant, output string) error {
	l, err := s.api.ListModels(ctx, tenant)
	if err != nil {
		return s.apiErr(err)
	}
	if err := printList(w, output, l, l.Models, func(m apiv1.Model) string { return m.Model },
		"MODEL\tRUNTIME\tSOURCE\tNODE TYPE\tGPUS/REPLICA\tNODES/REPLICA\tMASTER\tWHY", func(m apiv1.Model) []string {
			var rows []string
			for _, c := range m.Choices {
				rows = append(rows, fmt.Sprintf("%s\t%s\t%s\t%s\t%d\t%d\t%s\t%s", m.Model, m.Runtime, m.Source, c.NodeType, c.GPUsPerReplica, c.NodesPerReplica, c.Master, c.Why))
			}
			return rows
		}); err != nil || len(l.Shared) == 0 || (output != "" && output != "table") {
		return err
	}
	// The shared serving tier: what the tenant calls with its own keys, without a job.
	fmt.Fprintln(w)
	return printList(w, output, l, l.Shared, func(m apiv1.SharedModel) string { return m.Model },
		"SHARED MODEL\tPROVIDER\tENDPOINT\tURL", func(m apiv1.SharedModel) []string {
			return []string{fmt.Sprintf("%s\t%s\t%s/%s\t%s", m.Model, m.Provider, m.Provider, m.Endpoint, m.URL)}
		})
}

// keysCreate is `keys create` through the API: the key goes to w alone (or as data with -o),
// once, or to a new file only its owner can read; where it is stored and its ID to errOut.
func (s *apiSession) keysCreate(ctx context.Context, w, errOut io.Writer, tenant string, k apiv1.KeyCreate, output, file string) (err error) {
	if file != "" {
		out, err := newKeyFile(file)
		if err != nil {
			return err
		}
		defer func() {
			if cerr := out.Close(); err == nil && cerr != nil {
				err = cerr
			}
			if err != nil {
				os.Remove(file)
			}
		}()
		w = out
	}
	res, err := s.api.CreateKey(ctx, tenant, k, apiclient.WriteOptions{IdempotencyKey: newIdempotencyKey()})
	if err != nil {
		return s.apiErr(err)
	}
	if output == "json" || output == "yaml" {
		err = printData(w, output, res)
	} else {
		_, err = fmt.Fprintln(w, res.APIKey)
	}
	if err != nil {
		return err
	}
	scope := "every endpoint of " + res.Tenant
	if res.Endpoint != "" {
		scope = "endpoint " + res.Endpoint + " of " + res.Tenant
	}
	exp := "never expires"
	if res.ExpiresAt != nil {
		exp = "expires " + res.ExpiresAt.UTC().Format(time.RFC3339)
	}
	if res.Limits != nil {
		exp += "; " + describeLimits(res.Limits)
	}
	if file != "" {
		fmt.Fprintf(errOut, "key %s for %s, %s; written to %s (mode 0600), shown nowhere else\n", res.ID, scope, exp, file)
		return nil
	}
	fmt.Fprintf(errOut, "key %s for %s, %s; shown this once: keep it safe\n", res.ID, scope, exp)
	return nil
}

// keysList is `keys list` through the API (never a secret).
func (s *apiSession) keysList(ctx context.Context, w io.Writer, tenant, output string) error {
	l, err := s.api.ListKeys(ctx, tenant)
	if err != nil {
		return s.apiErr(err)
	}
	return printList(w, output, l, l.Items, func(k apiv1.Key) string { return k.ID },
		"ID\tTENANT\tENDPOINT\tNAME\tSTATUS\tCREATED\tEXPIRES", func(k apiv1.Key) []string {
			exp := "never"
			if k.ExpiresAt != nil {
				exp = k.ExpiresAt.UTC().Format(time.RFC3339)
			}
			return []string{fmt.Sprintf("%s\t%s\t%s\t%s\t%s\t%s\t%s", k.ID, k.Tenant, dashIfEmpty(k.Endpoint), dashIfEmpty(k.Name), k.Status, k.CreatedAt.UTC().Format(time.RFC3339), exp)}
		})
}

// keysRevoke is `keys revoke` through the API.
func (s *apiSession) keysRevoke(ctx context.Context, w io.Writer, tenant, id string) error {
	k, err := s.api.RevokeKey(ctx, tenant, id)
	if err != nil {
		return s.apiErr(err)
	}
	fmt.Fprintf(w, "revoked key %s of %s\n", k.ID, k.Tenant)
	return nil
}

// keysLimit is `keys limit` through the API: the key's new limits, in the words the operator's
// form prints.
func (s *apiSession) keysLimit(ctx context.Context, w io.Writer, tenant, id string, l *v1alpha1.RateLimits) error {
	k, err := s.api.SetKeyLimits(ctx, tenant, id, l)
	if err != nil {
		return s.apiErr(err)
	}
	_, err = fmt.Fprintf(w, "key %s (tenant %s): %s\n", k.ID, k.Tenant, describeLimits(k.Limits))
	return err
}

// usage is `keys usage` through the API: per key, its total and each hour.
func (s *apiSession) usage(ctx context.Context, w io.Writer, tenant string, q apiclient.UsageQuery, output string) error {
	u, err := s.api.Usage(ctx, tenant, q)
	if err != nil {
		return s.apiErr(err)
	}
	if output == "json" || output == "yaml" {
		return printData(w, output, u)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "KEY\tHOUR\tREQUESTS\tTOKENS IN\tTOKENS OUT\tENDPOINTS")
	for _, k := range u.Keys {
		for _, h := range k.Hours {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\n", k.KeyID, h.Hour.UTC().Format("2006-01-02T15:04Z"), h.Requests, h.TokensIn, h.TokensOut, strings.Join(k.Endpoints, ","))
		}
		fmt.Fprintf(tw, "%s\ttotal\t%d\t%d\t%d\t%s\n", k.KeyID, k.Total.Requests, k.Total.TokensIn, k.Total.TokensOut, strings.Join(k.Endpoints, ","))
	}
	if err := tw.Flush(); err != nil || len(u.Limits) == 0 {
		return err
	}
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "LIMIT\tSCOPE\tMODE\tUSED\tOF\tREMAINING\tRESETS")
	for _, l := range u.Limits {
		scope := "tenant " + u.Tenant
		if l.KeyID != "" {
			scope = "key " + l.KeyID
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\n", l.Limit, scope, l.Mode, l.Used, l.Value, l.Remaining, l.ResetsAt.UTC().Format(time.RFC3339))
	}
	if u.LimitsLocal {
		fmt.Fprintln(tw, "(one gateway replica's own counts: others' spend may be missing)")
	}
	return tw.Flush()
}

// health is `health` through the API: each endpoint of the tenant, summed over the gateway.
func (s *apiSession) health(ctx context.Context, w io.Writer, tenant, output string) error {
	l, err := s.api.Endpoints(ctx, tenant)
	if err != nil {
		return s.apiErr(err)
	}
	if output == "json" || output == "yaml" {
		return printData(w, output, l)
	}
	pct := func(f *float64, scale float64, unit string) string {
		if f == nil {
			return "-"
		}
		return fmt.Sprintf("%.1f%s", *f*scale, unit)
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ENDPOINT\tSTATUS\tREADY\tREQUESTS\tERRORS\tDENIED\tSUCCESS\tP50\tP99\tREASONS")
	for _, e := range l.Items {
		fmt.Fprintf(tw, "%s/%s\t%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\n", l.Tenant, e.Job, e.Status, e.Ready, e.Total, e.Requests, e.Errors, e.Denied,
			pct(e.SuccessRate, 100, "%"), pct(e.LatencyP50Ms, 1, "ms"), pct(e.LatencyP99Ms, 1, "ms"), strings.Join(e.Reasons, "; "))
	}
	return tw.Flush()
}
