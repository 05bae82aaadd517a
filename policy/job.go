package policy

import (
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/internal/vllmargs"
)

// Data is the policy data one object's rules read, already looked up. A nil field means the
// object names something the policy data does not hold.
type Data struct {
	Tenant   *v1alpha1.Tenant
	Master   *v1alpha1.ModelMaster
	NodeType *v1alpha1.NodeType
	// NodeTypes are the names of every NodeType in the policy data: where a rule refuses a node
	// type, it offers those of them the tenant may use instead. nil offers nothing.
	NodeTypes []string
	// Running is what the tenant's cluster runs, counted for the quota rules of admission; nil
	// when it is not counted (offline, or the tenant has no quota), which leaves those rules
	// out (the plan holds the inputs' jobs to the quota).
	Running *Running
}

// JobMaster names a job's master: its inferplane.io/model-master label, else spec.model read as
// a master name. path is where the name came from, for messages.
func JobMaster(job *v1alpha1.ManagedInferenceJob) (name string, path *field.Path) {
	if m := job.Labels[v1alpha1.LabelModelMaster]; m != "" {
		return m, metaLabels.Key(v1alpha1.LabelModelMaster)
	}
	return job.Spec.Model, specPath.Child("model")
}

// Paths the rules name often.
var (
	specPath    = field.NewPath("spec")
	metaLabels  = field.NewPath("metadata", "labels")
	metaName    = field.NewPath("metadata", "name")
	metaNS      = field.NewPath("metadata", "namespace")
	nodeTypeFld = specPath.Child("nodeType")
)

// CheckJob applies the rules to a guarded ManagedInferenceJob as the cluster holds it: its
// tenant exists and owns its namespace, it names a master the policy data holds, its name and
// spec pass CheckJobSpec, and, once they do and d.Running counts the tenant's cluster, it fits
// the tenant's quota beside the cluster's other jobs (CheckJobQuota).
func CheckJob(job *v1alpha1.ManagedInferenceJob, d Data) field.ErrorList {
	out := checkJob(job, d)
	if len(out) == 0 && d.Tenant != nil && d.Running != nil {
		var before *Claim
		for _, c := range d.Running.Jobs {
			if c.Job == job.Name {
				before = &c
			}
		}
		others := slices.DeleteFunc(slices.Clone(d.Running.Jobs), func(c Claim) bool { return c.Job == job.Name })
		out = CheckJobQuota(d.Tenant, job, others, before)
	}
	return out
}

func checkJob(job *v1alpha1.ManagedInferenceJob, d Data) field.ErrorList {
	out := checkTenant(job.Labels[v1alpha1.LabelTenant], job.Namespace, metaLabels, d.Tenant)
	switch masterName, masterField := JobMaster(job); {
	case masterName == "":
		out = append(out, field.Invalid(specPath.Child("model"), "", "the job names no ModelMaster: set spec.model or the label "+
			v1alpha1.LabelModelMaster))
	case d.Master == nil:
		out = append(out, notFound(masterField, v1alpha1.KindModelMaster, masterName))
	}
	return append(out, CheckJobSpec(job, d)...)
}

// CheckJobSpec is the rules on a job's name and spec, wherever the job comes from (a file of
// the inputs, the cluster, the product API): at least one replica; a model of the tenant's
// catalogue (JobModelOffered); a node type the tenant may use that can hold a replica of the
// master; gpuCount equal to the master's perReplicaGPUCount; the master's runtime and hardware
// profile; no extra argument that would change the GPUs or the launcher; a name that gives
// valid VM names (CheckJobName). The quota is CheckJobQuota's, against the other jobs. With
// d.Master nil, the rules that need the master are left out: the caller says why it has none.
func CheckJobSpec(job *v1alpha1.ManagedInferenceJob, d Data) field.ErrorList {
	var out field.ErrorList
	s := &job.Spec
	if s.Replicas < 1 {
		out = append(out, field.Invalid(specPath.Child("replicas"), s.Replicas, "must be at least 1"))
	}
	out = append(out, checkExtraArgs(s.ExtraArgs)...)
	// A model that resolves to no master is refused as such (the caller says why), not twice.
	if m := jobModel(job); d.Tenant != nil && d.Master != nil && !JobModelOffered(d.Tenant.Spec.Models, m, d.Master) {
		out = append(out, field.Invalid(specPath.Child("model"), m, fmt.Sprintf("not in Tenant %s's model catalogue (%s, its tier's or narrower)",
			d.Tenant.Name, strings.Join(d.Tenant.Spec.Models, ", "))))
	}
	nt := checkNodeTypeRef(&out, s.NodeType, nodeTypeFld, d)
	nodes := int32(1)
	master := d.Master
	if master != nil {
		name, path := JobMaster(job)
		master = checkMasterSane(&out, name, path, master)
	}
	if master == nil {
		if s.GPUCount < 1 {
			out = append(out, field.Invalid(specPath.Child("gpuCount"), s.GPUCount, "must be at least 1"))
		}
	} else {
		out = append(out, checkJobMaster(job, master, nt)...)
		if nt != nil {
			if l, err := ReplicaLayout(master, nt); err == nil {
				nodes = l.Nodes
			}
		}
	}
	if job.Name != "" {
		out = append(out, CheckJobName(metaName, job.Name, s.Replicas, nodes)...)
	}
	return out
}

// jobModel is the model a job names, for the model catalogue: spec.model, or Parakeet's model
// for a Parakeet job that leaves it out.
func jobModel(job *v1alpha1.ManagedInferenceJob) string {
	if job.Spec.Model == "" && job.Spec.EffectiveRuntime() == v1alpha1.RuntimeParakeet {
		return v1alpha1.ParakeetModel
	}
	return job.Spec.Model
}

// checkJobMaster holds a job to its master: the GPUs of a replica, the runtime, the hardware
// profile a hand-written master asks for, and a layout of the replica on the node type.
func checkJobMaster(job *v1alpha1.ManagedInferenceJob, master *v1alpha1.ModelMaster, nt *v1alpha1.NodeType) field.ErrorList {
	var out field.ErrorList
	s := &job.Spec
	if s.GPUCount != master.Spec.PerReplicaGPUCount {
		out = append(out, field.Invalid(specPath.Child("gpuCount"), s.GPUCount,
			fmt.Sprintf("must equal perReplicaGPUCount %d of ModelMaster %s", master.Spec.PerReplicaGPUCount, master.Name)))
	}
	if rt := s.EffectiveRuntime(); rt != master.Spec.Runtime {
		out = append(out, field.Invalid(specPath.Child("runtime"), string(rt),
			fmt.Sprintf("must match runtime %q of ModelMaster %s", master.Spec.Runtime, master.Name)))
	}
	if nt == nil {
		return out
	}
	if hp := master.Spec.HardwareProfile; hp != "" && hp != nt.Spec.HardwareProfile {
		out = append(out, field.Invalid(nodeTypeFld, nt.Name, fmt.Sprintf(
			"must be a NodeType with hardwareProfile %q, which ModelMaster %s is made for (NodeType %s has %s)",
			hp, master.Name, nt.Name, quotedOrNone(nt.Spec.HardwareProfile))))
	}
	if _, err := ReplicaLayout(master, nt); err != nil {
		out = append(out, field.Invalid(nodeTypeFld, nt.Name, err.Error()))
	}
	return out
}

func quotedOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return fmt.Sprintf("%q", s)
}

// reservedFlags are the model server flags a job's extraArgs may not set, and why: the master's
// parallelism decides the GPUs of a replica, the renderer sets the launcher and where the
// server listens, and a key in a job file would be committed to git. Short forms of the
// parallel sizes count as their long forms (vllmargs.ParallelFlag).
var reservedFlags = map[string]string{
	vllmargs.TensorParallelSize:    "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	vllmargs.PipelineParallelSize:  "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	vllmargs.DataParallelSize:      "the master's parallelism decides the GPUs of a replica; pick another master or variant",
	vllmargs.DataParallelSizeLocal: "the master's parallelism decides the GPUs of each node; pick another master or variant",
	"--nnodes":                     "the renderer sets the multi-node launcher flags per node",
	"--node-rank":                  "the renderer sets the multi-node launcher flags per node",
	"--master-addr":                "the renderer sets the multi-node launcher flags per node",
	"--master-port":                "the renderer sets the multi-node launcher flags per node",
	"--headless":                   "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-address":      "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-start-rank":   "the renderer sets the multi-node launcher flags per node",
	"--data-parallel-rpc-port":     "the renderer sets the multi-node launcher flags per node",
	"--host":                       "the server listens where Envoy and the readiness probe expect it",
	"--port":                       fmt.Sprintf("the server listens on port %d, where Envoy and the readiness probe expect it", v1alpha1.ServingPort),
	"--api-key":                    "API keys are checked by Envoy (requireAPIKey), and a key in a job file would be committed to git",
}

// checkExtraArgs refuses the reserved flags. The value is never shown: it may be a key.
func checkExtraArgs(args []string) field.ErrorList {
	var out field.ErrorList
	for i, a := range args {
		name, _, _ := strings.Cut(a, "=")
		flag := vllmargs.ParallelFlag(name)
		if flag == "" {
			flag = name
		}
		if why, ok := reservedFlags[flag]; ok {
			out = append(out, field.Invalid(specPath.Child("extraArgs").Index(i), fielderr.Omit,
				fmt.Sprintf("sets %s, which a job may not: %s", name, why)))
		}
	}
	return out
}

// checkTenant checks the tenant label against the policy data and the namespace.
func checkTenant(tenant, namespace string, labels *field.Path, t *v1alpha1.Tenant) field.ErrorList {
	path := labels.Key(v1alpha1.LabelTenant)
	if tenant == "" {
		return field.ErrorList{field.Invalid(path, "", "must name the tenant that owns the object")}
	}
	var out field.ErrorList
	if t == nil {
		out = append(out, notFound(path, v1alpha1.KindTenant, tenant))
	}
	if namespace != "" && namespace != tenant {
		out = append(out, field.Invalid(metaNS, namespace,
			fmt.Sprintf("a tenant's workloads live in the namespace named after it: must be %q (label %s)", tenant, v1alpha1.LabelTenant)))
	}
	return out
}

// notFound is a reference to policy data that does not exist.
func notFound(path *field.Path, kind, name string) *field.Error {
	e := field.NotFound(path, name)
	e.Detail = fmt.Sprintf("no %s %q in the policy data", kind, name)
	return e
}

// checkMasterRef reports a missing or insane master and returns it when it can be used.
func checkMasterRef(out *field.ErrorList, name string, path *field.Path, m *v1alpha1.ModelMaster) *v1alpha1.ModelMaster {
	if name == "" {
		return nil
	}
	if m == nil {
		*out = append(*out, notFound(path, v1alpha1.KindModelMaster, name))
		return nil
	}
	return checkMasterSane(out, name, path, m)
}

// checkMasterSane reports a master that breaks CheckMaster and returns it when it can be used.
func checkMasterSane(out *field.ErrorList, name string, path *field.Path, m *v1alpha1.ModelMaster) *v1alpha1.ModelMaster {
	if errs := CheckMaster(m); len(errs) > 0 {
		for _, e := range errs {
			*out = append(*out, field.Invalid(path, name, "ModelMaster "+m.Name+" is invalid: "+fielderr.Describe(e)))
		}
		return nil
	}
	return m
}
