package render

import (
	"cmp"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/problem"
	"github.com/inferplane/inferplane/policy"
)

// tenant is a tenant plan with every default applied and every value the builders need
// checked and parsed, so that the builders themselves cannot fail.
type tenant struct {
	obj  *v1alpha1.Tenant
	name string
	// namespace is where the tenant's workloads live in its tenant cluster (the tenant name).
	namespace string
	spec      *v1alpha1.TenantSpec
	labels    map[string]string
	opts      Options

	argoNamespace string
	destination   string
	connector     string

	nodeTypes []v1alpha1.NodeType
	jobs      []job
}

// job is one job plan, resolved.
type job struct {
	name string
	p    *plan.JobPlan

	runtime     v1alpha1.Runtime
	master      string
	image       string
	replicas    int32
	nodes       int32
	gpusPerNode int32
	// dpLocal is the data-parallel ranks of each node under vLLM's data-parallel launcher;
	// 0 under the --nnodes launcher.
	dpLocal    int32
	nodeType   *v1alpha1.NodeType
	guestImage string

	// cpu and memory are what one VM gets: the node type's, scaled to the VM's share of GPUs.
	cpu    uint32
	memory resource.Quantity
	cache  resource.Quantity

	requireAPIKey bool
	// fabric is the Multus network of a multi-node replica; empty for single-node jobs.
	fabric string
	// address is where the gateway reaches the serving nodes.
	address address
}

func (j *job) multiNode() bool { return j.nodes > 1 }

// serving reports whether node rank of a replica answers requests (policy.Layout.Serving).
func (j *job) serving(rank int32) bool {
	return policy.Layout{Nodes: j.nodes, GPUsPerNode: j.gpusPerNode, DataParallelLocal: j.dpLocal}.Serving(rank)
}

// secondaryNIC says whether the guest has a NIC besides the pod network's (the fabric, the
// serving network), which cloud-init's network data must bring up.
func (j *job) secondaryNIC() bool { return j.multiNode() || j.address.iface == netServing }

// resolve checks the plan and options and returns the resolved tenant, or every problem found.
func resolve(tp *plan.TenantPlan, opts Options) (*tenant, error) {
	var probs problem.List
	tn := tp.Tenant.Name
	tenantFile := "tenants/" + tn + "/tenant.yaml"

	for _, msg := range dns1123LabelErrs(tn) {
		probs.Add(tenantFile, field.NewPath("metadata", "name"), "a DNS-1123 label (it names the tenant's namespace)",
			"tenant name %q is not usable: %s", tn, msg)
	}
	if opts.RepoURL == "" {
		probs.Add(tenantFile, field.NewPath("spec", "git", "url"), "a repository URL Argo CD can pull (spec.git.url, or the generator's --repo-url for the embedded default)",
			"no repository URL for the tenant's Argo CD applications")
	}
	if u, err := url.Parse(opts.RepoURL); err == nil && u.User != nil {
		if _, hasPassword := u.User.Password(); hasPassword {
			probs.Add(tenantFile, field.NewPath("spec", "git", "url"), "a URL without credentials (name them in spec.git.auth)",
				"the repository URL carries a password, which would be written to the tenant's repository")
		}
	}
	checkOptions(&probs, tenantFile, opts)
	if len(tp.Jobs) > 0 && tp.Tenant.Spec.ArgoCD.Connector == "" {
		probs.Add(tenantFile, field.NewPath("spec", "argoCD", "connector"), "the vCluster Platform Argo CD connector name (e.g. argocd-main)",
			"required when the tenant has jobs: vCluster needs a connector to deploy Argo CD applications")
	}

	t := &tenant{
		obj:           &tp.Tenant,
		name:          tn,
		namespace:     tn,
		spec:          &tp.Tenant.Spec,
		opts:          opts,
		argoNamespace: ArgoCDNamespace(&tp.Tenant.Spec),
		destination:   Destination(tn, &tp.Tenant.Spec),
		connector:     tp.Tenant.Spec.ArgoCD.Connector,
		nodeTypes:     slices.Clone(tp.NodeTypes),
		labels:        map[string]string{v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue, v1alpha1.LabelTenant: tn},
	}
	slices.SortFunc(t.nodeTypes, func(a, b v1alpha1.NodeType) int { return strings.Compare(a.Name, b.Name) })

	for i := range t.nodeTypes {
		checkNodeType(&probs, &t.nodeTypes[i])
	}

	seenJob := map[string]bool{}
	masters := map[string]*plan.JobPlan{}
	for i := range tp.Jobs {
		jp := &tp.Jobs[i]
		if seenJob[jp.Job.Name] {
			probs.Add(jobFile(jp), field.NewPath("metadata", "name"), "job names unique within a tenant", "duplicate job %q", jp.Job.Name)
			continue
		}
		seenJob[jp.Job.Name] = true
		j, ok := resolveJob(&probs, t, jp)
		if !ok {
			continue
		}
		// A master is cluster-scoped in the tenant cluster: jobs that share a name must share
		// the whole spec, or their Applications would fight over one object.
		if other, dup := masters[j.master]; dup && !equality.Semantic.DeepEqual(other.Master.Spec, jp.Master.Spec) {
			probs.Add(jobFile(jp), field.NewPath("spec", "model"), "one spec per master name within a tenant",
				"master %q differs from the master of the same name used by job %q", j.master, other.Job.Name)
		}
		masters[j.master] = jp
		t.jobs = append(t.jobs, j)
	}
	slices.SortFunc(t.jobs, func(a, b job) int { return strings.Compare(a.name, b.name) })

	if err := probs.Err(); err != nil {
		return nil, err
	}
	return t, nil
}

// hasControl reports a control character other than tab and newline.
func hasControl(s string) bool {
	return strings.IndexFunc(s, func(c rune) bool {
		return c < 0x20 && c != '\t' && c != '\n' || c == 0x7f
	}) >= 0
}

func jobFile(jp *plan.JobPlan) string {
	if jp.SourceFile != "" {
		return jp.SourceFile
	}
	return "tenants/" + jp.Job.Labels[v1alpha1.LabelTenant] + "/jobs/" + jp.Job.Name + ".yaml"
}

// checkOptions checks the settings that end up in object names and in the guest script.
func checkOptions(probs *problem.List, file string, o Options) {
	for _, msg := range dns1123SubdomainErrs(o.HFTokenSecret) {
		probs.Add(file, nil, "a Secret name", "HF token Secret %q: %s", o.HFTokenSecret, msg)
	}
	if o.StorageClass != "" {
		for _, msg := range dns1123SubdomainErrs(o.StorageClass) {
			probs.Add(file, nil, "a storage class name", "storage class %q: %s", o.StorageClass, msg)
		}
	}
	for _, msg := range dns1123SubdomainErrs(o.ClusterDomain) {
		probs.Add(file, nil, "a DNS domain", "cluster domain %q: %s", o.ClusterDomain, msg)
	}
	if strings.ContainsAny(o.GuestImage, " \t\n") || hasControl(o.GuestImage) {
		probs.Add(file, nil, "an image reference", "guest image %q", o.GuestImage)
	}
}

func nodeTypeFile(nt *v1alpha1.NodeType) string { return "tenants/nodetypes/" + nt.Name + ".yaml" }

// checkNodeType checks what the builders read from a node type that the policy's rules do not
// (those are the job's, through policy.CheckJobSpec): what sizes a VM and boots its guest.
func checkNodeType(probs *problem.List, nt *v1alpha1.NodeType) {
	f := nodeTypeFile(nt)
	spec := field.NewPath("spec")
	if nt.Spec.CPU < 1 {
		probs.Add(f, spec.Child("cpu"), "at least 1", "got %d", nt.Spec.CPU)
	}
	if q, err := resource.ParseQuantity(nt.Spec.Memory); err != nil || q.Sign() <= 0 {
		probs.Add(f, spec.Child("memory"), "a positive Kubernetes quantity, e.g. 1800Gi", "got %q", nt.Spec.Memory)
	}
	if strings.ContainsAny(nt.Spec.GuestImage, " \t\n") || hasControl(nt.Spec.GuestImage) {
		probs.Add(f, spec.Child("guestImage"), "a containerDisk image reference", "got %q", nt.Spec.GuestImage)
	}
	if ib := nt.Spec.InfiniBand; ib != nil {
		if ib.ResourceName == "" {
			probs.Add(f, spec.Child("infiniBand", "resourceName"), "the InfiniBand device-plugin resource name", "missing")
		}
		if ib.Count < 1 {
			probs.Add(f, spec.Child("infiniBand", "count"), "at least 1", "got %d", ib.Count)
		}
	}
}

// resolveJob checks one job plan; ok is false when a problem was recorded.
func resolveJob(probs *problem.List, t *tenant, jp *plan.JobPlan) (job, bool) {
	before := len(*probs)
	f := jobFile(jp)
	nt := &jp.NodeType
	j := job{
		name:          jp.Job.Name,
		p:             jp,
		runtime:       jp.Job.Spec.EffectiveRuntime(),
		master:        jp.Master.Name,
		replicas:      jp.Job.Spec.Replicas,
		nodes:         jp.NodesPerReplica,
		gpusPerNode:   jp.GPUsPerNode,
		dpLocal:       jp.DataParallelLocal,
		nodeType:      nt,
		guestImage:    cmp.Or(nt.Spec.GuestImage, t.opts.GuestImage),
		requireAPIKey: jp.Job.Spec.APIKeyRequired(),
	}

	// The plan resolved the job with the policy's job rules; a plan built another way (tests,
	// fuzzing) is held to them here, and to the policy's layout, so that nothing the webhook
	// would deny is rendered.
	probs.AddError(f, policy.CheckJobSpec(&jp.Job, policy.Data{Tenant: t.obj, Master: &jp.Master, NodeType: nt})...)
	if l, err := policy.ReplicaLayout(&jp.Master, nt); err == nil && l != (policy.Layout{Nodes: j.nodes, GPUsPerNode: j.gpusPerNode, DataParallelLocal: j.dpLocal}) {
		probs.Add(f, field.NewPath("spec", "gpuCount"), fmt.Sprintf("the policy's layout of master %s on %s: %d node(s) x %d GPU(s)", j.master, nt.Name, l.Nodes, l.GPUsPerNode),
			"the plan lays a replica out as %d node(s) x %d GPU(s)", j.nodes, j.gpusPerNode)
	}
	switch j.runtime {
	case v1alpha1.RuntimeParakeet:
		j.image = cmp.Or(jp.Image, v1alpha1.DefaultParakeetImage)
	default:
		j.image = cmp.Or(jp.Image, v1alpha1.DefaultVLLMImage)
	}
	checkJobNames(probs, f, t, &j)
	if jp.Job.Spec.NodeType != "" && jp.Job.Spec.NodeType != nt.Name {
		probs.Add(f, field.NewPath("spec", "nodeType"), "the node type the plan resolved", "job names %q, plan carries %q", jp.Job.Spec.NodeType, nt.Name)
	}
	resolveResources(probs, f, t, jp, &j)
	checkServerArgs(probs, f, jp, &j)
	return j, len(*probs) == before
}

// checkJobNames checks the names built from the job that its name rule (policy.CheckJobName)
// does not cover: the Argo CD Application's, and the master's, which labels carry.
func checkJobNames(probs *problem.List, f string, t *tenant, j *job) {
	for _, msg := range dns1123SubdomainErrs(applicationName(t.name, j.name)) {
		probs.Add(f, field.NewPath("metadata", "name"), "a name that gives a valid Argo CD Application name (<tenant>-<job>)", "%s", msg)
	}
	if j.master == "" {
		probs.Add(f, field.NewPath("spec", "model"), "a resolved master with a name", "the plan gives the job no master name")
		return
	}
	for _, msg := range dns1123SubdomainErrs(j.master) {
		probs.Add(f, field.NewPath("spec", "model"), "a master name that is a valid object name", "master %q: %s", j.master, msg)
	}
	for _, msg := range labelValueErrs(j.master) {
		probs.Add(f, field.NewPath("spec", "model"), "a master name that is a valid label value (it is the inferplane.io/model-master label, at most 63 characters)", "master %q: %s", j.master, msg)
	}
}

// resolveResources checks the replica layout and sizes one VM (CPU, memory, model cache, fabric).
func resolveResources(probs *problem.List, f string, t *tenant, jp *plan.JobPlan, j *job) {
	nt := j.nodeType
	if j.nodes < 1 || j.gpusPerNode < 1 {
		return // the layout is refused above
	}
	// Resources of one VM: the node type's, scaled to the VM's share of the node's GPUs.
	nodeMem, err := resource.ParseQuantity(nt.Spec.Memory)
	if err == nil && nt.Spec.GPU.Count >= 1 && nt.Spec.CPU >= 1 && j.gpusPerNode >= 1 && j.gpusPerNode <= nt.Spec.GPU.Count {
		j.cpu, j.memory = share(nt.Spec.CPU, nodeMem, j.gpusPerNode, nt.Spec.GPU.Count)
	} else if err != nil || nt.Spec.CPU < 1 {
		probs.Add(f, field.NewPath("spec", "nodeType"), "a node type with valid spec.cpu and spec.memory", "node type %q cannot size a VM", nt.Name)
	}

	cacheText := cmp.Or(cmp.Or(jp.ModelCacheSize, jp.Job.Spec.ModelCacheSize), DefaultModelCacheSize)
	cache, err := resource.ParseQuantity(cacheText)
	switch {
	case err != nil:
		probs.Add(f, field.NewPath("spec", "modelCacheSize"), "a Kubernetes quantity, e.g. 200Gi", "got %q", cacheText)
	case cache.Sign() <= 0:
		probs.Add(f, field.NewPath("spec", "modelCacheSize"), "a positive size", "got %q", cache.String())
	default:
		j.cache = cache
	}

	if j.multiNode() {
		j.fabric = t.opts.FabricNetwork
		if nt.Spec.InfiniBand != nil && nt.Spec.InfiniBand.Network != "" {
			j.fabric = nt.Spec.InfiniBand.Network
		}
	}
	resolveAddress(probs, t, j, "tenants/"+t.name+"/tenant.yaml")
}

// checkServerArgs: the launcher script single-quotes every argument and cloud-init reads it as
// YAML, so a control character (other than tab and newline) could survive neither.
func checkServerArgs(probs *problem.List, f string, jp *plan.JobPlan, j *job) {
	for i, a := range jp.Args {
		if hasControl(a) {
			probs.Add(f, field.NewPath("spec", "extraArgs"), "arguments without control characters", "argument %d of the model server (%q) contains one", i, a)
		}
	}
	for _, e := range jp.Env {
		if e.Name == "" || strings.ContainsRune(e.Name, '=') || hasControl(e.Name) || hasControl(e.Value) ||
			strings.ContainsAny(e.SecretKey, "/\x00") || hasControl(e.SecretKey) {
			probs.Add(f, field.NewPath("spec", "model"), "master env names without '=', values without control characters, secret keys without '/'", "env %q of master %q", e.Name, j.master)
		}
	}
	if hasControl(j.image) || strings.ContainsAny(j.image, " \t\n") {
		probs.Add(f, field.NewPath("spec", "model"), "a container image reference", "image %q of master %q", j.image, j.master)
	}
}

// share is the CPU and memory of a VM that takes gpus of a node's count GPUs. A VM that takes
// the whole node keeps the node type's memory string as written.
func share(cpu int32, mem resource.Quantity, gpus, count int32) (uint32, resource.Quantity) {
	if gpus == count {
		return uint32(cpu), mem
	}
	c := int64(cpu) * int64(gpus) / int64(count)
	if c < 1 {
		c = 1
	}
	// Round down to whole MiB so the guest memory is a clean quantity.
	const mi = 1 << 20
	var b int64
	if v := mem.Value(); v > math.MaxInt64/64 {
		b = v / int64(count) * int64(gpus) // absurdly large: divide first, never overflow
	} else {
		b = v * int64(gpus) / int64(count)
	}
	b = b / mi * mi
	if b < mi {
		b = mi
	}
	return uint32(c), *resource.NewQuantity(b, resource.BinarySI)
}

// Names of the rendered objects (docs/design.md, "Workload contract").

func serviceName(job string, replica int32) string { return job + "-r" + strconv.Itoa(int(replica)) }
func cloudInitName(vm string) string               { return vm + "-cloud-init" }
func modelCacheName(vm string) string              { return vm + "-model-cache" }
func applicationName(tenant, job string) string    { return tenant + "-" + job }

// VMShare is the CPU cores and guest memory of a VM that takes gpus of a node of type nt: the
// node type's, scaled to the VM's share of the node's GPUs (rounded down to whole cores, at
// least one, and to whole MiB).
func VMShare(nt *v1alpha1.NodeType, gpus int32) (uint32, resource.Quantity, error) {
	mem, err := resource.ParseQuantity(nt.Spec.Memory)
	if err != nil || nt.Spec.CPU < 1 || nt.Spec.GPU.Count < 1 || gpus < 1 || gpus > nt.Spec.GPU.Count {
		return 0, resource.Quantity{}, fmt.Errorf("node type %s cannot host a VM of %d GPUs", nt.Name, gpus)
	}
	cpu, q := share(nt.Spec.CPU, mem, gpus, nt.Spec.GPU.Count)
	return cpu, q, nil
}
