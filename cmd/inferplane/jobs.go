package main

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"
	"time"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"golang.org/x/term"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/lifecycle/jobfile"
)

func newJobsCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "jobs",
		Short: "Create, inspect, restart and delete inference jobs",
		Long: `jobs follows one inference job from "created" to "serving" and back:

  create    writes tenants/<tenant>/jobs/<job>.yaml, checked by the rules generate applies,
            and renders and commits that tenant's repository
  list      every job with its readiness stage
  detail    one job: its master, endpoint, and per replica its nodes and readiness stage
  restart   replaces a job's VMs in its tenant cluster, keeping the model cache
  delete    removes the job from the inputs and commits the tenant's repository without it
  logs      what the job's model servers print, and follows it

Readiness stages, in order: syncing (Argo CD has not synced the job), waiting-for-capacity
(no node with free GPUs, or the model-cache claim is not bound), booting (scheduled, the
guest is starting), pulling-image and downloading-weights (what the inference agent in the
VM reports, with bytes done and total), loading-model (running; the model server's /health
does not pass yet, or the gateway has not taken it in), serving (in the gateway's rotation);
failed says why; crash-looping says the model server keeps exiting, with its exit code, how
long it ran, the restarts and its last line (jobs logs shows the lines before). A job is as
far as its least ready replica.

list and detail read the job's Argo CD Application in the host cluster (--kubeconfig,
--context), its VMs in the tenant's own cluster (and the agent's status from the console log
of a running VM the gateway does not serve yet), and the gateway's view (--server, the
xDS server's admin address). Exit codes: 0 serving, 3 on its way (syncing to
loading-model), 4 failed or crash-looping, 1 an error (a cluster could not be read), 2 bad usage.

A tenant's cluster (for list, detail and restart) is found, by --tenant-clusters:
  kubeconfig  the kubeconfig's context --tenant-context (default: the tenant's Argo CD
              cluster name, spec.argoCD.destination, else the tenant's name)
  registry    the cluster registry the gateway reads in the host cluster: the Argo CD cluster
              Secret (in --argocd-namespace) whose name key is the tenant's Argo CD cluster
              name, else the Secret labelled inferplane.io/tenant=<tenant> or vCluster's
              vc-<tenant> (in a --vcluster-namespace); its server and credentials
  auto        (default) the kubeconfig when it has the tenant's context, else the registry`,
		Example: `  inferplane jobs create acme/chat --model Qwen/Qwen3-32B --replicas 2
  inferplane jobs detail acme/chat --wait
  inferplane jobs list --tenant acme
  inferplane jobs restart acme/chat --replica 1
  inferplane jobs logs acme/chat -f
  inferplane jobs delete acme/chat --revoke-keys`,
	}
	cmd.AddCommand(newJobsCreateCmd(), newJobsDeleteCmd(), newJobsListCmd(), newJobsDetailCmd(), newJobsRestartCmd(), newJobsLogsCmd())
	return cmd
}

// inputFlags say where the inputs and the tenants' repositories are and how to render, as
// generate's flags do, so that a jobs command and a later generate agree byte for byte.
type inputFlags struct {
	opts         generator.Options
	guestImage   string
	storageClass string
}

func (f *inputFlags) register(fs *pflag.FlagSet) {
	fs.StringVar(&f.opts.RecipesDir, "recipes", "recipes", usageRecipes)
	fs.StringVar(&f.opts.TenantsDir, "tenants", "tenants", usageTenants)
}

// registerRender adds the flags of the commands that render and commit: generate's, and the
// jobs commands', which must render byte for byte what generate would.
func (f *inputFlags) registerRender(fs *pflag.FlagSet) {
	f.register(fs)
	fs.StringVar(&f.opts.OutDir, "out-dir", "out", "folder of the tenants' repositories (out/<tenant>)")
	deprecatedAlias(fs, "out", "out-dir")
	fs.StringVar(&f.opts.RepoURL, "repo-url", generator.DefaultRepoURL,
		"URL Argo CD pulls a tenant's repository from when the tenant sets no spec.git.url ({tenant} is replaced)")
	fs.StringVar(&f.guestImage, "guest-image", render.DefaultGuestImage, "golden VM disk (containerDisk image) for node types that name none")
	fs.StringVar(&f.storageClass, "storage-class", "", "storage class of the model-cache volumes (default: the tenant cluster's default class)")
}

// options are generate's options for one tenant.
func (f *inputFlags) options(cmd *cobra.Command, tenant string) generator.Options {
	o := f.opts
	o.Tenant = tenant
	o.Render.GuestImage = f.guestImage
	o.Render.StorageClass = f.storageClass
	o.Check = generator.AdmissionCheck(cmd.Context())
	return o
}

// plan checks that the tenant exists and plans its inputs exactly as generate would.
func (f *inputFlags) plan(cmd *cobra.Command, tenant string) (generator.Options, *generator.Planned, error) {
	if err := jobfile.CheckTenant(f.opts.TenantsDir, tenant); err != nil {
		return generator.Options{}, nil, err
	}
	opts := f.options(cmd, tenant)
	planned, err := generator.Plan(opts)
	return opts, planned, err
}

// planJob is plan for one job of the tenant, which must exist.
func (f *inputFlags) planJob(cmd *cobra.Command, tenant, job string) (*plan.TenantPlan, *plan.JobPlan, error) {
	_, planned, err := f.plan(cmd, tenant)
	if err != nil {
		return nil, nil, err
	}
	tp := &planned.Plan.Tenants[0]
	if jp := tp.Job(job); jp != nil {
		return tp, jp, nil
	}
	_, err = jobfile.Find(planned.Inputs, f.opts.TenantsDir, tenant, job)
	return nil, nil, err
}

// jobArg splits <tenant>/<job>; an endpoint's name (<job>.<tenant>) gets a hint.
func jobArg(arg string) (tenant, job string, err error) {
	tenant, job, ok := strings.Cut(arg, "/")
	if !ok || tenant == "" || job == "" {
		hint := ", e.g. acme/chat"
		if j, t, dot := strings.Cut(arg, "."); !ok && dot && j != "" && t != "" && !strings.ContainsAny(t, "./") {
			hint = fmt.Sprintf("; did you mean %s/%s? (%s is the name of its endpoint, <job>.<tenant>)", t, j, arg)
		}
		return "", "", usageErr(fmt.Errorf("%q: expected <tenant>/<job>%s", arg, hint))
	}
	if err := errors.Join(jobfile.CheckName("tenant", tenant), jobfile.CheckJobName(job, 0)); err != nil {
		return "", "", usageErr(err)
	}
	return tenant, job, nil
}

// oneJob is the Args of the commands that take one <tenant>/<job>: a job given as two words
// (tenant and job) gets a hint.
func oneJob(cmd *cobra.Command, args []string) error {
	if len(args) == 2 && !strings.Contains(args[0]+args[1], "/") {
		return usageErr(fmt.Errorf("accepts 1 arg(s), received 2: a job is one argument, <tenant>/<job>; did you mean %s/%s?", args[0], args[1]))
	}
	return cobra.ExactArgs(1)(cmd, args)
}

type createFlags struct {
	spec     v1alpha1.ManagedInferenceJobSpec
	features []string
	noKey    bool
	replace  bool
	noCommit bool
}

func newJobsCreateCmd() *cobra.Command {
	var (
		in inputFlags
		f  createFlags
	)
	cmd := &cobra.Command{
		Use:   "create <tenant>/<job> --model M [--variant V] [--node-type T] [--gpus N] [--replicas R] [--feature k=v]...",
		Short: "Write a job into the inputs, then render and commit its tenant's repository",
		Long: `create writes tenants/<tenant>/jobs/<job>.yaml and renders and commits that tenant's
repository, exactly as generate would: the job is checked by the same rules (same messages),
every problem is printed, and on any problem nothing is written or committed.

--model is a recipe model id (Qwen/Qwen3-32B) or a ModelMaster name; --gpus defaults to the
master's perReplicaGPUCount, --node-type to the tenant's only allowed node type.
--no-commit writes the job file and shows the diff generate would commit; --dry-run writes
nothing and shows both. An existing job is replaced only with --replace.`,
		Example: `  # Qwen3-32B on one H100, two replicas behind one endpoint
  inferplane jobs create acme/chat --model Qwen/Qwen3-32B --node-type metal3.gpu-h100 --replicas 2

  # FP8 variant, reasoning parser off, see what would change first
  inferplane jobs create acme/chat-fp8 --model Qwen/Qwen3-32B --variant fp8 --feature reasoning=off --dry-run

  # Speech to text
  inferplane jobs create acme/asr --model nvidia/parakeet-tdt-0.6b-v3 --node-type metal3.gpu-h100`,
		Args:              oneJob,
		ValidArgsFunction: completeNewJob,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, job, err := jobArg(args[0])
			if err != nil {
				return err
			}
			return runJobsCreate(cmd, &in, &f, tenant, job)
		},
	}
	fl := cmd.Flags()
	in.registerRender(fl)
	fl.StringVar(&f.spec.Model, "model", "", "the model: a recipe model id or a ModelMaster name (required)")
	fl.StringVar((*string)(&f.spec.Runtime), "runtime", "", "vllm or parakeet (default: parakeet for the Parakeet model, else vllm)")
	fl.StringVar(&f.spec.Variant, "variant", "", "recipe variant (default: the recipe's default)")
	fl.StringVar(&f.spec.NodeType, "node-type", "", "NodeType the replicas run on: a node type of the tenants folder (default: the tenant's only allowed one)")
	fl.Int32Var(&f.spec.GPUCount, "gpus", 0, "GPUs per replica (default: the master's perReplicaGPUCount)")
	fl.Int32Var(&f.spec.Replicas, "replicas", 1, "number of replicas behind the endpoint")
	fl.StringVar(&f.spec.ModelCacheSize, "model-cache-size", "", "model-cache volume per node (default 200Gi)")
	fl.StringArrayVar(&f.features, "feature", nil, "turn a recipe feature on or off: name=on|off (repeatable)")
	fl.BoolVar(&f.noKey, "no-api-key", false, "serve the endpoint without API keys (requireAPIKey: false)")
	fl.BoolVar(&f.replace, "replace", false, "overwrite an existing job of that name")
	fl.BoolVar(&f.noCommit, "no-commit", false, "write the job file, show what generate would commit, commit nothing")
	fl.BoolVar(&in.opts.DryRun, "dry-run", false, "write nothing; show the job file and the diff of the tenant's repository")
	_ = cmd.MarkFlagRequired("model")
	_ = cmd.RegisterFlagCompletionFunc("model", completeModel)
	_ = cmd.RegisterFlagCompletionFunc("node-type", completeNodeType)
	return cmd
}

func runJobsCreate(cmd *cobra.Command, in *inputFlags, f *createFlags, tenant, job string) error {
	if err := jobfile.CheckJobName(job, f.spec.Replicas); err != nil {
		return usageErr(err)
	}
	features, err := parseFeatures(f.features)
	if err != nil {
		return usageErr(err)
	}
	opts, planned, err := in.plan(cmd, tenant)
	if err != nil {
		return err
	}
	spec := f.spec
	spec.Features = features
	if f.noKey {
		no := false
		spec.RequireAPIKey = &no
	}
	nj, err := jobfile.New(planned.Inputs, planned.Book, opts.TenantsDir, tenant, job, spec, jobfile.CLIHeader, f.replace)
	if e := (*jobfile.ExistsError)(nil); errors.As(err, &e) {
		return fmt.Errorf("%w; pass --replace to overwrite it", err)
	}
	if err != nil {
		return err
	}
	rel, data := nj.Rel, nj.Data
	tree, err := jobfile.Tree(opts.TenantsDir, tenant)
	if err != nil {
		return err
	}
	tree[rel] = &fstest.MapFile{Data: data}
	opts.Tenants = tree
	opts.DryRun = opts.DryRun || f.noCommit
	out := cmd.OutOrStdout()
	path := filepath.Join(opts.TenantsDir, filepath.FromSlash(rel))
	rep, err := generator.Generate(cmd.Context(), opts)
	if err != nil {
		printReport(out, cmd.ErrOrStderr(), rep)
		return err
	}
	if in.opts.DryRun {
		// Said only of a job that passed: a refused one would not be written.
		fmt.Fprintf(out, "would write %s:\n%s\n", path, data)
		printReport(out, cmd.ErrOrStderr(), rep)
		return nil
	}
	printReport(out, cmd.ErrOrStderr(), rep)
	if err := jobfile.Write(opts.TenantsDir, rel, data); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	if f.noCommit {
		fmt.Fprintf(out, "wrote %s; nothing committed: `inferplane generate` commits the change shown above\n", path)
		return nil
	}
	fmt.Fprintf(out, "wrote %s and committed %s\nArgo CD syncs the job from there; follow it with: inferplane jobs detail %s/%s\n",
		path, filepath.Join(opts.OutDir, tenant), tenant, job)
	return nil
}

// deleteFlags are jobs delete's flags.
type deleteFlags struct {
	in         inputFlags
	sf         storeFlags
	yes        bool
	revokeKeys bool
}

func newJobsDeleteCmd() *cobra.Command {
	var f deleteFlags
	cmd := &cobra.Command{
		Use:   "delete <tenant>/<job> [--revoke-keys] [--yes]",
		Short: "Remove a job from the inputs and commit its tenant's repository without it",
		Long: `delete removes the job's file from tenants/<tenant>/jobs/ and renders and commits the
tenant's repository without it: the repository is then as if the job had never existed. When
Argo CD syncs that commit, its prune deletes the job's Application, whose resources
finalizer deletes the job's VMs, Services, Secrets and model-cache PVCs (the downloaded
weights) from the tenant cluster.

The API keys limited to the job's endpoint stay active unless --revoke-keys revokes them with
the job (a job created again under the same name would otherwise take them back); delete says
which stay. Keys for every endpoint of the tenant are not touched.

Asks for confirmation on a terminal; elsewhere --yes is required.`,
		Example: `  inferplane jobs delete acme/chat
  inferplane jobs delete acme/chat --dry-run                 # the diff it would commit
  inferplane jobs delete acme/chat --yes --revoke-keys       # in scripts, with the endpoint's keys`,
		Args:              oneJob,
		ValidArgsFunction: completeJobs,
		RunE: func(cmd *cobra.Command, args []string) error {
			tenant, job, err := jobArg(args[0])
			if err != nil {
				return err
			}
			return runJobsDelete(cmd, &f, tenant, job)
		},
	}
	f.in.registerRender(cmd.Flags())
	f.sf.register(cmd)
	cmd.Flags().BoolVar(&f.in.opts.DryRun, "dry-run", false, "write nothing; show the diff of the tenant's repository")
	cmd.Flags().BoolVarP(&f.yes, "yes", "y", false, "do not ask for confirmation (required when stdin is not a terminal)")
	cmd.Flags().BoolVar(&f.revokeKeys, "revoke-keys", false, "also revoke the API keys limited to the job's endpoint")
	return cmd
}

func runJobsDelete(cmd *cobra.Command, f *deleteFlags, tenant, job string) error {
	opts, planned, err := f.in.plan(cmd, tenant)
	if err != nil {
		return err
	}
	rel, err := jobfile.Find(planned.Inputs, opts.TenantsDir, tenant, job)
	if err != nil {
		return err
	}
	// The keys are read first: with --revoke-keys, a store that cannot be read stops the
	// deletion before anything is committed.
	ek, keysErr := endpointKeys(cmd, &f.sf, tenant, job)
	if keysErr != nil && f.revokeKeys {
		return fmt.Errorf("--revoke-keys: %w (nothing was deleted)", keysErr)
	}
	path := filepath.Join(opts.TenantsDir, filepath.FromSlash(rel))
	if !opts.DryRun && !f.yes {
		also := ""
		if f.revokeKeys && len(ek.ids) > 0 {
			also = fmt.Sprintf(", and revoke its %d API key(s)", len(ek.ids))
		}
		if err := confirm(cmd, fmt.Sprintf("Delete job %s/%s (%s) and commit %s without it%s? [y/N] ",
			tenant, job, path, filepath.Join(opts.OutDir, tenant), also)); err != nil {
			return err
		}
	}
	tree, err := jobfile.Tree(opts.TenantsDir, tenant)
	if err != nil {
		return err
	}
	delete(tree, rel)
	opts.Tenants = tree
	rep, err := generator.Generate(cmd.Context(), opts)
	printReport(cmd.OutOrStdout(), cmd.ErrOrStderr(), rep)
	if err != nil {
		return err
	}
	if opts.DryRun {
		if f.revokeKeys && len(ek.ids) > 0 {
			fmt.Fprintf(cmd.OutOrStdout(), "would revoke the API keys of endpoint %s/%s: %s\n", tenant, job, strings.Join(ek.ids, ", "))
		}
		return nil
	}
	if err := jobfile.Remove(opts.TenantsDir, rel); err != nil {
		return fmt.Errorf("remove %s: %w", path, err)
	}
	fmt.Fprintf(cmd.OutOrStdout(), "removed %s and committed %s without the job\n"+
		"When Argo CD syncs it, its prune deletes Application %s; that Application's resources finalizer deletes the job's VMs, Services, Secrets and model-cache PVCs (the downloaded weights) in the tenant cluster.\n",
		path, filepath.Join(opts.OutDir, tenant), render.ApplicationName(tenant, job))
	return ek.settle(cmd, f.revokeKeys, keysErr)
}

// jobKeys are the active API keys limited to one job's endpoint.
type jobKeys struct {
	tenant, job string
	store       keys.Store
	ids         []string
}

// endpointKeys lists the active keys limited to tenant/job; no store file means no keys.
func endpointKeys(cmd *cobra.Command, sf *storeFlags, tenant, job string) (jobKeys, error) {
	ek := jobKeys{tenant: tenant, job: job}
	store, _, err := sf.open(true)
	if err != nil {
		if sf.namespace == "" && sf.file == "" && os.Getenv(envKeysFile) == "" {
			return ek, nil // the default store was never made: no key exists
		}
		return ek, err
	}
	recs, err := store.List(cmd.Context())
	if err != nil {
		return ek, err
	}
	now := time.Now()
	for _, r := range recs {
		if r.Tenant == tenant && r.Endpoint == job && r.Status(now) == keys.StatusActive {
			ek.ids = append(ek.ids, r.ID)
		}
	}
	ek.store = store
	return ek, nil
}

// settle revokes the keys (revoke) or says that they stay active; readErr is why they could not
// be listed.
func (ek jobKeys) settle(cmd *cobra.Command, revoke bool, readErr error) error {
	out := cmd.OutOrStdout()
	endpoint := ek.tenant + "/" + ek.job
	switch {
	case readErr != nil:
		fmt.Fprintf(cmd.ErrOrStderr(), "warning: could not list the API keys of endpoint %s: %v; those limited to it stay active until revoked\n", endpoint, readErr)
	case len(ek.ids) == 0:
		fmt.Fprintf(out, "No API key was limited to endpoint %s.\n", endpoint)
	case revoke:
		return revokeKeys(cmd, ek.store, ek.ids)
	default:
		keysStayActive(out, endpoint, ek.ids)
	}
	return nil
}

// keysStayActive says which keys limited to a deleted job's endpoint stay active, and how to
// revoke them (jobs delete on the files and through the API).
func keysStayActive(w io.Writer, endpoint string, ids []string) {
	fmt.Fprintf(w, "%d API key(s) limited to endpoint %s stay active: %s; revoke them with `inferplane keys revoke %s` (or delete with --revoke-keys).\n",
		len(ids), endpoint, strings.Join(ids, ", "), strings.Join(ids, " "))
}

// confirm asks on a terminal; anywhere else the caller must pass --yes.
func confirm(cmd *cobra.Command, question string) error {
	f, ok := cmd.InOrStdin().(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return usageErr(errors.New("stdin is not a terminal: pass --yes to confirm"))
	}
	fmt.Fprint(cmd.ErrOrStderr(), question)
	var answer string
	if _, err := fmt.Fscanln(f, &answer); err != nil && !errors.Is(err, io.EOF) && err.Error() != "unexpected newline" {
		return err
	}
	if a := strings.ToLower(strings.TrimSpace(answer)); a != "y" && a != "yes" {
		return errors.New("not confirmed: nothing was changed")
	}
	return nil
}
