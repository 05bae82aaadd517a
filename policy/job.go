package policy

import (
	"fmt"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Data is the policy data one object's rules read, already looked up. A nil field means the
// object names something the policy data does not hold.
type Data struct {
	Tenant   *v1alpha1.Tenant
	Master   *v1alpha1.ModelMaster
	NodeType *v1alpha1.NodeType
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

// CheckJob applies the rules to a guarded ManagedInferenceJob: its tenant exists and owns its
// namespace, its master exists and is sane, gpuCount equals the master's perReplicaGPUCount,
// the runtimes agree, its node type exists, is allowed for the tenant and can hold a replica.
func CheckJob(job *v1alpha1.ManagedInferenceJob, d Data) field.ErrorList {
	var out field.ErrorList
	tenant := job.Labels[v1alpha1.LabelTenant]
	out = append(out, checkTenant(tenant, job.Namespace, metaLabels, d.Tenant)...)

	if job.Spec.Replicas < 1 {
		out = append(out, field.Invalid(specPath.Child("replicas"), job.Spec.Replicas, "must be at least 1"))
	}
	masterName, masterField := JobMaster(job)
	if masterName == "" {
		out = append(out, field.Invalid(specPath.Child("model"), "", "the job names no ModelMaster: set spec.model or the label "+
			v1alpha1.LabelModelMaster))
	}
	master := checkMasterRef(&out, masterName, masterField, d.Master)
	nt := checkNodeTypeRef(&out, job.Spec.NodeType, nodeTypeFld, d.NodeType)
	if d.Tenant != nil && !NodeTypeAllowed(d.Tenant.Spec.AllowedNodeTypes, job.Spec.NodeType) {
		out = append(out, notAllowed(nodeTypeFld, job.Spec.NodeType, d.Tenant))
	}
	if master == nil {
		return out
	}

	if job.Spec.GPUCount != master.Spec.PerReplicaGPUCount {
		out = append(out, field.Invalid(specPath.Child("gpuCount"), job.Spec.GPUCount,
			fmt.Sprintf("must equal perReplicaGPUCount %d of ModelMaster %s", master.Spec.PerReplicaGPUCount, master.Name)))
	}
	if rt := job.Spec.EffectiveRuntime(); rt != master.Spec.Runtime {
		out = append(out, field.Invalid(specPath.Child("runtime"), string(rt),
			fmt.Sprintf("must match runtime %q of ModelMaster %s", master.Spec.Runtime, master.Name)))
	}
	// Extra args come after the master's and win per flag: they must not change how many GPUs
	// the server spreads over.
	if extra, _ := parseParallelism(job.Spec.ExtraArgs); extra.set() && master.Spec.PerReplicaGPUCount >= 1 {
		total := masterParallelism(master).override(extra)
		if g, ok := total.gpus(int64(master.Spec.PerReplicaGPUCount)); !ok || g != int64(master.Spec.PerReplicaGPUCount) {
			out = append(out, field.Invalid(specPath.Child("extraArgs"), omit,
				fmt.Sprintf("a parallelism override: the server would run %s GPUs, but perReplicaGPUCount of ModelMaster %s is %d",
					total.describe(), master.Name, master.Spec.PerReplicaGPUCount)))
		}
	}
	if nt != nil {
		if _, err := ReplicaLayout(master, nt); err != nil {
			out = append(out, field.Invalid(nodeTypeFld, nt.Name, err.Error()))
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
	if errs := CheckMaster(m); len(errs) > 0 {
		for _, e := range errs {
			*out = append(*out, field.Invalid(path, name, "ModelMaster "+name+" is invalid: "+Describe(e)))
		}
		return nil
	}
	return m
}

// checkNodeTypeRef reports a missing or unusable node type and returns it when it can be used.
func checkNodeTypeRef(out *field.ErrorList, name string, path *field.Path, nt *v1alpha1.NodeType) *v1alpha1.NodeType {
	if name == "" {
		*out = append(*out, field.Invalid(path, "", "must name a NodeType"))
		return nil
	}
	if nt == nil {
		*out = append(*out, notFound(path, v1alpha1.KindNodeType, name))
		return nil
	}
	if ps := nodeTypeProblems(nt); len(ps) > 0 {
		for _, p := range ps {
			*out = append(*out, field.Invalid(path, name, "NodeType "+name+" is unusable: "+p))
		}
		return nil
	}
	return nt
}

func notAllowed(path *field.Path, nodeType string, t *v1alpha1.Tenant) *field.Error {
	return field.Invalid(path, nodeType, fmt.Sprintf("not allowed for Tenant %s (allowedNodeTypes: %s)",
		t.Name, describeAllowed(t.Spec.AllowedNodeTypes)))
}
