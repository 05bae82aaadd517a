package main

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/util/duration"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/api/gatewayv1"
	"github.com/inferplane/inferplane/endpoint"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/jobstatus"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/lifecycle/gateway"
	"github.com/inferplane/inferplane/lifecycle/jobfile"
)

// Exit codes of jobs list and detail, for scripts.
const (
	exitOnItsWay = 3
	exitFailed   = 4
)

// How the jobs commands find a tenant's cluster (--tenant-clusters).
const (
	tenantClustersAuto       = "auto"
	tenantClustersKubeconfig = "kubeconfig"
	tenantClustersRegistry   = "registry"
)

// clusterFlags say how the jobs commands reach the clusters and the gateway.
type clusterFlags struct {
	kube           cluster.Kubeconfig
	tenantClusters string
	registry       registryFlags
	server         string
	domain         string
	// acc is how the clusters are reached, set from the flags before the command runs.
	acc cluster.Access
}

// register adds the flags to cmd and checks them before it runs (a usage error, exit 2).
func (f *clusterFlags) register(cmd *cobra.Command) {
	fs := cmd.Flags()
	fs.StringVar(&f.kube.Path, "kubeconfig", "", "kubeconfig file of the host and tenant clusters (default: $KUBECONFIG, then ~/.kube/config)")
	fs.StringVar(&f.kube.HostContext, "context", "", "kubeconfig context of the host cluster, where Argo CD runs (default: the current context)")
	fs.StringVar(&f.tenantClusters, "tenant-clusters", tenantClustersAuto, "how a tenant's cluster is found: "+
		"kubeconfig (the context --tenant-context), registry (the host cluster's Argo CD cluster Secrets or vCluster kubeconfig Secrets, as the gateway finds it) "+
		"or auto (the kubeconfig when it has the tenant's context, else the registry)")
	fs.StringVar(&f.kube.TenantContext, "tenant-context", cluster.DefaultTenantContext,
		"kubeconfig context of a tenant's cluster; {tenant} and {cluster} (its Argo CD cluster name) are replaced (--tenant-clusters kubeconfig or auto)")
	f.registry.register(fs, "--tenant-clusters registry or auto")
	addServerFlag(fs, &f.server)
	addDomainFlag(fs, &f.domain, false)
	cmd.PreRunE = func(cmd *cobra.Command, _ []string) error {
		if err := f.resolve(cmd.Flags()); err != nil {
			return usageErr(err)
		}
		return nil
	}
}

// resolve checks the flags that say how the clusters are reached and sets acc; each error
// names the flag.
func (f *clusterFlags) resolve(fs *pflag.FlagSet) error {
	o, err := f.registry.options()
	if err != nil {
		return err
	}
	if err := o.Validate(); err != nil {
		return fmt.Errorf("--argocd-namespace/--vcluster-namespace: %w", err)
	}
	reg := &cluster.Registry{Kubeconfig: f.kube, Options: o}
	switch f.tenantClusters {
	case tenantClustersAuto:
		f.acc = cluster.Auto{Kubeconfig: f.kube, Registry: reg}
	case tenantClustersKubeconfig:
		for _, name := range registryFlagNames {
			if fs.Changed(name) {
				return fmt.Errorf("--%s is for --tenant-clusters registry or auto: --tenant-clusters kubeconfig reads no registry", name)
			}
		}
		f.acc = f.kube
	case tenantClustersRegistry:
		if fs.Changed("tenant-context") {
			return errors.New("--tenant-context is for --tenant-clusters kubeconfig or auto: --tenant-clusters registry reads no tenant context")
		}
		f.acc = reg
	default:
		return fmt.Errorf("--tenant-clusters %q: expected %s, %s or %s", f.tenantClusters, tenantClustersAuto, tenantClustersRegistry, tenantClustersKubeconfig)
	}
	return nil
}

// access is how the clusters are reached (set by resolve before the command runs).
func (f *clusterFlags) access() cluster.Access { return f.acc }

// statuses reads a tenant's clusters and the gateway and computes the stages of its jobs (of
// job only, when set).
func statuses(ctx context.Context, f *clusterFlags, tp *plan.TenantPlan, job string) ([]lifecycle.JobStatus, error) {
	r := jobstatus.Reader{Cluster: cluster.Direct{Access: f.access()}, Gateway: gateway.Client{BaseURL: f.server}, Logs: tenantLogs{f}}
	return r.Read(ctx, tp, job)
}

// tenantLogs reaches the console logs of a tenant's cluster, for the agents' reports.
type tenantLogs struct{ f *clusterFlags }

func (l tenantLogs) GuestLogs(ctx context.Context, t cluster.Tenant) (joblogs.Cluster, error) {
	cfg, err := l.f.access().Tenant(ctx, t.Name, t.Cluster)
	if err != nil {
		return nil, err
	}
	return joblogs.NewKube(cfg)
}

// stageExit is the exit status of the least ready stage shown.
func stageExit(worst lifecycle.Stage, what string) error {
	switch worst {
	case lifecycle.StageServing:
		return nil
	case lifecycle.StageFailed, lifecycle.StageCrashLooping:
		return &exitStatus{code: exitFailed, err: fmt.Errorf("%s: %s", what, worst)}
	}
	return &exitStatus{code: exitOnItsWay, err: fmt.Errorf("%s: %s, not serving yet", what, worst)}
}

func newJobsListCmd() *cobra.Command {
	var (
		in     inputFlags
		cf     clusterFlags
		tenant string
	)
	cmd := &cobra.Command{
		Use:   "list [--tenant T]",
		Short: "List jobs with their readiness stage",
		Long: `list shows every job of the inputs (of one tenant with --tenant) with its readiness stage,
read from the host cluster's Argo CD, the tenant's cluster and the gateway (see "jobs --help").
A tenant whose clusters cannot be read shows its jobs as unknown and makes list exit 1.`,
		Example: `  inferplane jobs list
  inferplane jobs list --tenant acme --tenant-context 'vcluster_{tenant}_vcluster-{tenant}_mgmt'

  # Tenant clusters from the host cluster's Argo CD cluster Secrets, as the gateway finds them
  inferplane jobs list --context mgmt --tenant-clusters registry`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if tenant != "" {
				if err := jobfile.CheckName("tenant", tenant); err != nil {
					return usageErr(err)
				}
			}
			planned, err := generator.Plan(in.options(cmd, tenant))
			if err != nil {
				return err
			}
			return listJobs(cmd, &cf, planned.Plan)
		},
	}
	in.register(cmd.Flags())
	cf.register(cmd)
	cmd.Flags().StringVar(&tenant, "tenant", "", "tenant whose jobs to list (default: every tenant's)")
	_ = cmd.RegisterFlagCompletionFunc("tenant", completeTenants)
	return cmd
}

func listJobs(cmd *cobra.Command, cf *clusterFlags, p *plan.Plan) error {
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "TENANT\tJOB\tRUNTIME\tMODEL\tREPLICAS\tSTAGE\tSINCE\tREASON")
	var unread []error
	worst := lifecycle.StageServing
	for i := range p.Tenants {
		tp := &p.Tenants[i]
		if len(tp.Jobs) == 0 {
			continue
		}
		sts, err := statuses(cmd.Context(), cf, tp, "")
		if err != nil {
			unread = append(unread, err)
			for _, jp := range tp.Jobs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t-\tclusters not read (below)\n", tp.Tenant.Name, jp.Job.Name,
					jp.Master.Spec.Runtime, jp.Master.Spec.Model, jp.Job.Spec.Replicas, lifecycle.StageUnknown)
			}
			continue
		}
		for j, st := range sts {
			jp := tp.Jobs[j]
			fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", st.Tenant, st.Job, jp.Master.Spec.Runtime, jp.Master.Spec.Model,
				jp.Job.Spec.Replicas, st.Stage, age(st.Since), st.Reason)
			if st.Stage.Rank() < worst.Rank() {
				worst = st.Stage
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(unread) > 0 {
		return errors.Join(unread...)
	}
	return stageExit(worst, "not every job is serving")
}

// waitFlags are detail's --wait and --wait-timeout.
type waitFlags struct {
	wait    bool
	timeout time.Duration
}

func newJobsDetailCmd() *cobra.Command {
	var (
		in     inputFlags
		cf     clusterFlags
		w      waitFlags
		output string
	)
	cmd := &cobra.Command{
		Use:   "detail <tenant>/<job> [-o table|json|yaml] [--wait]",
		Short: "Show a job's master, endpoint, replicas, nodes and readiness stages",
		Long: `detail shows one job: its master (model, image, serving arguments, GPUs per replica), its
endpoint and whether it needs an API key, and per replica the node count, the node names the
VMs run on, their phase and IPs, and the replica's readiness stage with the time it entered
it and why (see "jobs --help" for the stages and exit codes).

What the inputs say (master, endpoint, replicas) is shown even when a cluster cannot be read;
detail then says which part it could not read and how to give it (exit status 1).

--wait follows the job until it serves, fails or crash-loops (or --wait-timeout passes),
printing each change of stage on standard error, then shows the detail. A crash loop shows
the model server's exit and last line; inferplane jobs logs shows the lines before it.`,
		Example: `  inferplane jobs detail acme/chat
  inferplane jobs detail acme/chat --wait                      # until it serves (exit 0), fails or crash-loops (exit 4)
  inferplane jobs detail acme/chat -o json | jq .replicas
  inferplane jobs detail acme/chat --tenant-clusters registry --vcluster-namespace vcluster-acme   # through the cluster registry`,
		Args:              oneJob,
		ValidArgsFunction: completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, job, err := jobArg(args[0])
			if err != nil {
				return err
			}
			return showDetail(cmd, &in, &cf, tenant, job, output, w)
		},
	}
	in.register(cmd.Flags())
	cf.register(cmd)
	registerOutput(cmd, &output, "table", "", "table", "json", "yaml")
	cmd.Flags().BoolVar(&w.wait, "wait", false, "follow the job until it serves, fails or crash-loops, then show it")
	cmd.Flags().DurationVar(&w.timeout, "wait-timeout", 15*time.Minute, "with --wait: give up after this long (exit 3)")
	return cmd
}

// jobDetail is what detail shows.
type jobDetail struct {
	lifecycle.JobStatus
	Endpoint endpointView `json:"endpoint"`
	Master   masterView   `json:"master"`
	// Desired is what the inputs ask for.
	Desired desiredView `json:"desired"`
	// ClusterError says why the clusters were not read (the stages are then unknown).
	ClusterError string `json:"clusterError,omitempty"`
}

type desiredView struct {
	Replicas        int32 `json:"replicas"`
	NodesPerReplica int32 `json:"nodesPerReplica"`
	GPUsPerNode     int32 `json:"gpusPerNode"`
}

type endpointView struct {
	URL            string `json:"url"`
	RequiresAPIKey bool   `json:"requiresAPIKey"`
}

type masterView struct {
	Name               string   `json:"name"`
	Runtime            string   `json:"runtime"`
	Model              string   `json:"model"`
	Image              string   `json:"image"`
	ImagePinned        bool     `json:"imagePinned"`
	Args               []string `json:"args,omitempty"`
	PerReplicaGPUCount int32    `json:"perReplicaGPUCount"`
	NodesPerReplica    int32    `json:"nodesPerReplica"`
	GPUsPerNode        int32    `json:"gpusPerNode"`
	NodeType           string   `json:"nodeType"`
}

func showDetail(cmd *cobra.Command, in *inputFlags, cf *clusterFlags, tenant, job, output string, w waitFlags) error {
	tp, jp, err := in.planJob(cmd, tenant, job)
	if err != nil {
		return err
	}
	d := jobDetail{Endpoint: endpointView{URL: endpointURL(job, tenant, cf.domain), RequiresAPIKey: jp.Job.Spec.APIKeyRequired()},
		Master: masterView{Name: jp.Master.Name, Runtime: string(jp.Master.Spec.Runtime), Model: jp.Master.Spec.Model, Image: jp.Image,
			ImagePinned: imagePinned(jp.Image), Args: jp.Args, PerReplicaGPUCount: jp.Master.Spec.PerReplicaGPUCount,
			NodesPerReplica: jp.NodesPerReplica, GPUsPerNode: jp.GPUsPerNode, NodeType: jp.NodeType.Name},
		Desired: desiredView{Replicas: jp.Job.Spec.Replicas, NodesPerReplica: jp.NodesPerReplica, GPUsPerNode: jp.GPUsPerNode}}
	var readErr error
	if w.wait {
		d.JobStatus, readErr = waitForJob(cmd, cf, tp, job, w.timeout)
	} else {
		d.JobStatus, readErr = jobStatus(cmd.Context(), cf, tp, job)
	}
	if readErr != nil {
		d.ClusterError = readErr.Error()
	}
	if err := writeDetail(cmd.OutOrStdout(), d, output); err != nil {
		return err
	}
	if readErr != nil {
		return fmt.Errorf("%w%s", readErr, clusterHint(readErr))
	}
	if w.wait && !jobstatus.Settled(d.Stage) {
		return &exitStatus{code: exitOnItsWay, err: fmt.Errorf("%s/%s: still %s after %s (--wait-timeout)", tenant, job, d.Stage, w.timeout)}
	}
	return stageExit(d.Stage, tenant+"/"+job)
}

// jobStatus is the job's status; when its clusters cannot be read, the status says what is
// known without them (the gateway's view, if it answers) and the error says why.
func jobStatus(ctx context.Context, cf *clusterFlags, tp *plan.TenantPlan, job string) (lifecycle.JobStatus, error) {
	sts, err := statuses(ctx, cf, tp, job)
	if err == nil {
		return sts[0], nil
	}
	st := lifecycle.JobStatus{Tenant: tp.Tenant.Name, Job: job, Stage: lifecycle.StageUnknown, Reason: "the clusters could not be read (below)",
		Replicas: []lifecycle.ReplicaStatus{}}
	rot, gwErr := gateway.Client{BaseURL: cf.server}.Rotations(ctx, tp.Tenant.Name)
	st.Gateway, st.GatewayError = jobstatus.GatewayView(rot, gwErr, job)
	return st, err
}

// waitForJob follows the job until it serves or fails, or timeout passes, saying on stderr
// each time its stage or reason changes.
func waitForJob(cmd *cobra.Command, cf *clusterFlags, tp *plan.TenantPlan, job string, timeout time.Duration) (lifecycle.JobStatus, error) {
	return jobstatus.Wait(cmd.Context(), waitInterval, timeout,
		func(ctx context.Context) (lifecycle.JobStatus, error) { return jobStatus(ctx, cf, tp, job) },
		func(st lifecycle.JobStatus) (lifecycle.Stage, string) { return st.Stage, st.Reason },
		func(st lifecycle.JobStatus) {
			sayStage(cmd.ErrOrStderr(), tp.Tenant.Name, job, string(st.Stage), st.Reason)
		})
}

// waitInterval is how often --wait reads the job.
const waitInterval = 2 * time.Second

// sayStage is one line of --wait: the time, the job, its stage and why.
func sayStage(w io.Writer, tenant, job, stage, reason string) {
	fmt.Fprintf(w, "%s %s/%s: %s: %s\n", time.Now().Format(time.TimeOnly), tenant, job, stage, reason)
}

// clusterHint says how to give what a cluster error lacks.
func clusterHint(err error) string {
	if errors.Is(err, cluster.ErrNoKubeconfig) {
		return "; pass --kubeconfig FILE (and --context), or set $KUBECONFIG (the local demo writes one: make demo, then . .demo/env)"
	}
	return ""
}

func writeDetail(w io.Writer, d jobDetail, output string) error {
	switch output {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(d)
	case "yaml":
		b, err := yaml.Marshal(d)
		if err != nil {
			return err
		}
		_, err = w.Write(b)
		return err
	}
	m := d.Master
	fmt.Fprintf(w, "Job:        %s/%s\n", d.Tenant, d.Job)
	fmt.Fprintf(w, "Stage:      %s%s\n", d.Stage, sinceText(d.Since))
	if d.Reason != "" {
		fmt.Fprintf(w, "Reason:     %s\n", d.Reason)
	}
	key := "API key required"
	if !d.Endpoint.RequiresAPIKey {
		key = "no API key"
	}
	fmt.Fprintf(w, "Endpoint:   %s (%s)\n", d.Endpoint.URL, key)
	fmt.Fprintf(w, "Master:     %s: %s (%s); %s per replica: %s x %s of %s\n", m.Name, m.Model, m.Runtime,
		count(m.PerReplicaGPUCount, "GPU"), count(m.NodesPerReplica, "node"), count(m.GPUsPerNode, "GPU"), m.NodeType)
	pin := ""
	if !m.ImagePinned {
		pin = " (not pinned: the tag can move; see docs/generator.md, Pinning images)"
	}
	fmt.Fprintf(w, "Image:      %s%s\n", m.Image, pin)
	fmt.Fprintf(w, "Serve args: %s\n", cmp.Or(strings.Join(m.Args, " "), "-"))
	fmt.Fprintf(w, "Replicas:   %d desired, %s x %s each\n", d.Desired.Replicas, count(d.Desired.NodesPerReplica, "node"), count(d.Desired.GPUsPerNode, "GPU"))
	if d.ClusterError != "" {
		fmt.Fprintf(w, "Clusters:   not read: %s\n", d.ClusterError)
	} else if a := d.Application; a != nil {
		fmt.Fprintf(w, "Argo CD:    Application %s: %s, %s, revision %s\n", a.Name, a.Sync, cmp.Or(a.Health, "-"), cmp.Or(a.Revision, "-"))
	} else {
		fmt.Fprintln(w, "Argo CD:    no Application yet")
	}
	switch g := d.Gateway; {
	case g == nil:
		fmt.Fprintf(w, "Gateway:    not asked: %s\n", d.GatewayError)
	case !g.Known:
		fmt.Fprintln(w, "Gateway:    no endpoint for the job yet")
	default:
		fmt.Fprintf(w, "Gateway:    %s, %d of %d replicas in rotation\n", g.Status, g.Ready, g.Total)
	}
	if d.ClusterError != "" {
		return nil
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "REPLICA\tSTAGE\tSINCE\tNODES\tNODE NAMES\tPHASE\tIPS\tREASON")
	for _, r := range d.Replicas {
		var nodes, phases, ips []string
		for _, n := range r.Nodes {
			nodes, phases = append(nodes, cmp.Or(n.Node, "-")), append(phases, cmp.Or(n.Phase, "-"))
			ips = append(ips, cmp.Or(strings.Join(n.IPs, ","), "-"))
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\n", r.Replica, r.Stage, age(r.Since), len(r.Nodes),
			strings.Join(nodes, ","), strings.Join(phases, ","), strings.Join(ips, " "), r.Reason)
	}
	return tw.Flush()
}

// count is "1 GPU", "8 GPUs".
func count(n int32, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// endpointURL is the job's endpoint; without a domain, a placeholder that says so.
func endpointURL(job, tenant, domain string) string {
	return gatewayv1.URL(tenant, job, cmp.Or(domain, "<domain: set --domain or $"+endpoint.EnvDomain+">"))
}

// imagePinned: a digest, or a tag other than latest (a version tag is taken to be kept).
func imagePinned(image string) bool {
	if strings.Contains(image, "@sha256:") {
		return true
	}
	name := image[strings.LastIndex(image, "/")+1:]
	_, tag, ok := strings.Cut(name, ":")
	return ok && tag != "latest"
}

func sinceText(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return " since " + t.UTC().Format(time.RFC3339) + " (" + age(t) + " ago)"
}

func age(t time.Time) string {
	if t.IsZero() {
		return "-"
	}
	return duration.HumanDuration(time.Since(t))
}

func newJobsRestartCmd() *cobra.Command {
	var (
		in      inputFlags
		cf      clusterFlags
		replica int32
	)
	cmd := &cobra.Command{
		Use:   "restart <tenant>/<job> [--replica N]",
		Short: "Replace a job's VMs in its tenant cluster, keeping the model cache",
		Long: `restart replaces the VMs of a job (of one replica with --replica) in the tenant's cluster.
Their model-cache PVCs (the downloaded weights), cloud-init Secrets and the VirtualMachines
themselves stay, so the new VMs load the model from the cache. A multi-node replica is
restarted whole.

It uses KubeVirt's restart subresource where the cluster serves it (virt-api); otherwise it
deletes the VMIs, and the VMs' runStrategy Always starts new ones. It says which it did.`,
		Example: `  inferplane jobs restart acme/chat
  inferplane jobs restart acme/chat --replica 1
  inferplane jobs restart acme/chat --tenant-clusters registry   # the tenant cluster from its Argo CD cluster Secret`,
		Args:              oneJob,
		ValidArgsFunction: completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, job, err := jobArg(args[0])
			if err != nil {
				return err
			}
			return runJobsRestart(cmd, &in, &cf, tenant, job, replica)
		},
	}
	in.register(cmd.Flags())
	cf.register(cmd)
	cmd.Flags().Int32Var(&replica, "replica", -1, "only this replica (0, 1, ...) is restarted; default all")
	return cmd
}

// replicaNumbers words a job's replica numbers: "replica 0", "replicas 0 and 1", "replicas 0 to 3".
func replicaNumbers(n int32) string {
	switch n {
	case 1:
		return "replica 0 only"
	case 2:
		return "replicas 0 and 1"
	}
	return fmt.Sprintf("replicas 0 to %d", n-1)
}

func runJobsRestart(cmd *cobra.Command, in *inputFlags, cf *clusterFlags, tenant, job string, replica int32) error {
	if replica < -1 {
		return usageErr(fmt.Errorf("--replica %d: expected a replica number, 0 or more", replica))
	}
	tp, jp, err := in.planJob(cmd, tenant, job)
	if err != nil {
		return err
	}
	if n := jp.Job.Spec.Replicas; replica >= n {
		return usageErr(fmt.Errorf("--replica %d: the job has %s", replica, replicaNumbers(n)))
	}
	t := jobstatus.Tenant(tp)
	cfg, err := cf.access().Tenant(cmd.Context(), t.Name, t.Cluster)
	if err != nil {
		return err
	}
	done, err := cluster.Restart(cmd.Context(), cfg, t, job, replica)
	out := cmd.OutOrStdout()
	for _, r := range done {
		fmt.Fprintf(out, "%s/%s: %s: %s\n", tenant, job, r.VM, r.How)
	}
	if err != nil {
		return err
	}
	if len(done) > 0 && done[0].How != cluster.BySubresource {
		fmt.Fprintln(out, "The cluster does not serve KubeVirt's restart subresource: the VMIs were deleted and runStrategy Always starts new ones; the model-cache PVCs and Secrets stay.")
	} else {
		fmt.Fprintln(out, "Restarted through KubeVirt's restart subresource; the model-cache PVCs and Secrets stay.")
	}
	fmt.Fprintf(out, "Follow the new VMs with: inferplane jobs detail %s/%s\n", tenant, job)
	return nil
}
