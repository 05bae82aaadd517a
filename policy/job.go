package policy

import (
	"fmt"

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
// a master name. field is where the name came from, for messages.
func JobMaster(job *v1alpha1.ManagedInferenceJob) (name, field string) {
	if m := job.Labels[v1alpha1.LabelModelMaster]; m != "" {
		return m, labelField("metadata.labels", v1alpha1.LabelModelMaster)
	}
	return job.Spec.Model, "spec.model"
}

// CheckJob applies the rules to a guarded ManagedInferenceJob: its tenant exists and owns its
// namespace, its master exists and is sane, gpuCount equals the master's perReplicaGPUCount,
// the runtimes agree, its node type exists, is allowed for the tenant and can hold a replica.
func CheckJob(job *v1alpha1.ManagedInferenceJob, d Data) []Violation {
	var out []Violation
	tenant := job.Labels[v1alpha1.LabelTenant]
	out = append(out, checkTenant(tenant, job.Namespace, "metadata.labels", d.Tenant)...)

	if job.Spec.Replicas < 1 {
		out = append(out, Violation{"spec.replicas", itoa(job.Spec.Replicas), "must be at least 1"})
	}
	masterName, masterField := JobMaster(job)
	if masterName == "" {
		out = append(out, Violation{"spec.model", `""`, "the job names no ModelMaster: set spec.model or the label " +
			v1alpha1.LabelModelMaster})
	}
	master := checkMasterRef(&out, masterName, masterField, d.Master)
	nt := checkNodeTypeRef(&out, job.Spec.NodeType, "spec.nodeType", d.NodeType)
	if d.Tenant != nil && !NodeTypeAllowed(d.Tenant.Spec.AllowedNodeTypes, job.Spec.NodeType) {
		out = append(out, notAllowed("spec.nodeType", job.Spec.NodeType, d.Tenant))
	}
	if master == nil {
		return out
	}

	if job.Spec.GPUCount != master.Spec.PerReplicaGPUCount {
		out = append(out, Violation{"spec.gpuCount", itoa(job.Spec.GPUCount),
			fmt.Sprintf("must equal perReplicaGPUCount %d of ModelMaster %s", master.Spec.PerReplicaGPUCount, master.Name)})
	}
	if rt := job.Spec.EffectiveRuntime(); rt != master.Spec.Runtime {
		out = append(out, Violation{"spec.runtime", quote(string(rt)),
			fmt.Sprintf("must match runtime %q of ModelMaster %s", master.Spec.Runtime, master.Name)})
	}
	// Extra args come after the master's and win per flag: they must not change how many GPUs
	// the server spreads over.
	if extra, _ := parseParallelism(job.Spec.ExtraArgs); extra.set() && master.Spec.PerReplicaGPUCount >= 1 {
		total := masterParallelism(master).override(extra)
		if g, ok := total.gpus(int64(master.Spec.PerReplicaGPUCount)); !ok || g != int64(master.Spec.PerReplicaGPUCount) {
			out = append(out, Violation{"spec.extraArgs", "a parallelism override",
				fmt.Sprintf("the server would run %s GPUs, but perReplicaGPUCount of ModelMaster %s is %d",
					total.describe(), master.Name, master.Spec.PerReplicaGPUCount)})
		}
	}
	if nt != nil {
		if _, err := ReplicaLayout(master, nt); err != nil {
			out = append(out, Violation{"spec.nodeType", quote(nt.Name), err.Error()})
		}
	}
	return out
}

// checkTenant checks the tenant label against the policy data and the namespace.
func checkTenant(tenant, namespace, labelsPath string, t *v1alpha1.Tenant) []Violation {
	field := labelField(labelsPath, v1alpha1.LabelTenant)
	if tenant == "" {
		return []Violation{{field, `""`, "must name the tenant that owns the object"}}
	}
	var out []Violation
	if t == nil {
		out = append(out, Violation{field, quote(tenant),
			fmt.Sprintf("no Tenant %q in the policy data", tenant)})
	}
	if namespace != "" && namespace != tenant {
		out = append(out, Violation{"metadata.namespace", quote(namespace),
			fmt.Sprintf("a tenant's workloads live in the namespace named after it: must be %q (label %s)", tenant, v1alpha1.LabelTenant)})
	}
	return out
}

// checkMasterRef reports a missing or insane master and returns it when it can be used.
func checkMasterRef(out *[]Violation, name, field string, m *v1alpha1.ModelMaster) *v1alpha1.ModelMaster {
	if name == "" {
		return nil
	}
	if m == nil {
		*out = append(*out, Violation{field, quote(name), fmt.Sprintf("no ModelMaster %q in the policy data", name)})
		return nil
	}
	if vs := CheckMaster(m); len(vs) > 0 {
		for _, v := range vs {
			*out = append(*out, Violation{field, quote(name), "ModelMaster " + name + " is invalid: " + v.String()})
		}
		return nil
	}
	return m
}

// checkNodeTypeRef reports a missing or unusable node type and returns it when it can be used.
func checkNodeTypeRef(out *[]Violation, name, field string, nt *v1alpha1.NodeType) *v1alpha1.NodeType {
	if name == "" {
		*out = append(*out, Violation{field, `""`, "must name a NodeType"})
		return nil
	}
	if nt == nil {
		*out = append(*out, Violation{field, quote(name), fmt.Sprintf("no NodeType %q in the policy data", name)})
		return nil
	}
	if ps := nodeTypeProblems(nt); len(ps) > 0 {
		for _, p := range ps {
			*out = append(*out, Violation{field, quote(name), "NodeType " + name + " is unusable: " + p})
		}
		return nil
	}
	return nt
}

func notAllowed(field, nodeType string, t *v1alpha1.Tenant) Violation {
	return Violation{field, quote(nodeType), fmt.Sprintf("not allowed for Tenant %s (allowedNodeTypes: %s)",
		t.Name, describeAllowed(t.Spec.AllowedNodeTypes))}
}
