package policy

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Claim is what one job claims of its tenant's quota (from its spec), or what a tenant's
// cluster runs of one job (from its VMs).
type Claim struct {
	Job      string
	Replicas int32
	GPUs     int64
}

// JobClaim is what a job claims: its replicas, and replicas x gpuCount GPUs.
func JobClaim(j *v1alpha1.ManagedInferenceJob) Claim {
	return Claim{Job: j.Name, Replicas: j.Spec.Replicas, GPUs: int64(j.Spec.Replicas) * int64(j.Spec.GPUCount)}
}

// JobClaims are the claims of jobs, but the one named except.
func JobClaims(jobs []*v1alpha1.ManagedInferenceJob, except string) []Claim {
	out := make([]Claim, 0, len(jobs))
	for _, j := range jobs {
		if j.Name != except {
			out = append(out, JobClaim(j))
		}
	}
	return out
}

// NodeClaim is one node of a replica that a tenant's cluster runs: a VirtualMachine, or a
// VirtualMachineInstance that no VirtualMachine owns.
type NodeClaim struct {
	Name, Job, Replica string
	GPUs               int64
}

// Running is what a tenant's cluster runs, as the quota rules of admission count it.
type Running struct {
	// Jobs are the tenant's ManagedInferenceJobs.
	Jobs []Claim
	// Nodes are its VirtualMachines, and its VMIs that no VirtualMachine owns.
	Nodes []NodeClaim
}

// Used sums claims: GPUs, and the jobs they belong to (each once, sorted).
func Used(claims []Claim) (gpus int64, jobs []string) {
	seen := map[string]bool{}
	for _, c := range claims {
		gpus += c.GPUs
		seen[c.Job] = true
	}
	return gpus, slices.Sorted(maps.Keys(seen))
}

// CheckJobQuota holds a job to its tenant's quota in force (Tenant.spec.quota as ApplyTier
// makes it): its replicas to replicasPerJob, a new job to jobs, and the GPUs of all the
// tenant's jobs to gpus. others are what the tenant's other jobs claim (in the inputs, or in
// its cluster); before is what this job claimed until now (nil: it is new). What already runs
// is kept: only growth is refused (more replicas or GPUs than before, or one more job), so a
// quota lowered below what the tenant runs stops nothing and refuses any growth until the
// tenant is back under it. A refusal says what the job needs, the quota, and what the others
// use.
func CheckJobQuota(t *v1alpha1.Tenant, job *v1alpha1.ManagedInferenceJob, others []Claim, before *Claim) field.ErrorList {
	q := t.Spec.Quota
	if q.IsZero() {
		return nil
	}
	after := JobClaim(job)
	var out field.ErrorList
	if q.ReplicasPerJob > 0 && after.Replicas > q.ReplicasPerJob && (before == nil || after.Replicas > before.Replicas) {
		out = append(out, field.Invalid(specPath.Child("replicas"), after.Replicas,
			fmt.Sprintf("must be at most %d, Tenant %s's quota of replicas per job", q.ReplicasPerJob, t.Name)))
	}
	need := fmt.Sprintf("%s x %d", count(after.Replicas, "replica"), job.Spec.GPUCount)
	return append(out, checkQuota(t, quotaAsk{after: after, before: before, others: others, noun: "jobs",
		gpus: specPath.Child("replicas"), gpusValue: after.Replicas, need: need, name: metaName})...)
}

// checkWorkloadQuota holds one VM (or a VMI no VM owns) to its tenant's quota, counting what
// the tenant's cluster runs: the GPUs of every other node of the tenant's replicas, its jobs,
// and the replica's index to replicasPerJob. As CheckJobQuota, it refuses only growth: a new
// node, or more GPUs than the node of that name has.
func checkWorkloadQuota(w workload, d Data) field.ErrorList {
	q := d.Tenant.Spec.Quota
	if q.IsZero() || d.Running == nil {
		return nil
	}
	n := w.names()
	job, replica := w.podLabels[v1alpha1.LabelJob], w.podLabels[v1alpha1.LabelReplica]
	var before *Claim
	byJob := map[string]*Claim{}
	replicas := map[string]map[string]bool{}
	for _, node := range d.Running.Nodes {
		if node.Name == w.name {
			before = &Claim{Job: node.Job, Replicas: 1, GPUs: node.GPUs}
			continue
		}
		c := byJob[node.Job]
		if c == nil {
			c = &Claim{Job: node.Job}
			byJob[node.Job], replicas[node.Job] = c, map[string]bool{}
		}
		c.GPUs += node.GPUs
		if !replicas[node.Job][node.Replica] {
			replicas[node.Job][node.Replica] = true
			c.Replicas++
		}
	}
	others := make([]Claim, 0, len(byJob))
	for _, name := range slices.Sorted(maps.Keys(byJob)) {
		others = append(others, *byJob[name])
	}
	var out field.ErrorList
	if r, err := ordinal(replica); err == nil && q.ReplicasPerJob > 0 && r >= int64(q.ReplicasPerJob) && before == nil {
		out = append(out, field.Invalid(w.labelsPath.Key(v1alpha1.LabelReplica), replica,
			fmt.Sprintf("must be below %d, Tenant %s's quota of replicas per job", q.ReplicasPerJob, n.Tenant)))
	}
	gpus := int64(len(w.spec.Domain.Devices.GPUs))
	need := fmt.Sprintf("%s %s/%s, node %s of replica %s of job %s", w.kind, w.namespace, w.name,
		w.podLabels[v1alpha1.LabelNodeRank], replica, job)
	return append(out, checkQuota(d.Tenant, quotaAsk{after: Claim{Job: job, Replicas: 1, GPUs: gpus}, before: before, others: others,
		noun: "VMs", gpus: w.specPath.Child("domain", "devices", "gpus"), gpusValue: gpus, need: need,
		name: w.labelsPath.Key(v1alpha1.LabelJob)})...)
}

// quotaAsk is one growth the quota rule judges, and where its refusals point.
type quotaAsk struct {
	after  Claim
	before *Claim
	others []Claim
	// noun is what the others are, for the words: "jobs", "VMs".
	noun string
	// gpus and gpusValue are the field and value a GPU refusal names; need says what the
	// GPUs asked for are.
	gpus      *field.Path
	gpusValue any
	need      string
	// name is the field that names the job, for a refusal of one more job.
	name *field.Path
}

// checkQuota is the quota rule of jobs and of the nodes a cluster runs: one more job than the
// jobs quota, or GPUs past the GPU quota, refused only when the ask grows.
func checkQuota(t *v1alpha1.Tenant, a quotaAsk) field.ErrorList {
	q := t.Spec.Quota
	used, jobs := Used(a.others)
	var out field.ErrorList
	if q.Jobs > 0 && a.before == nil && !slices.Contains(jobs, a.after.Job) && len(jobs) >= int(q.Jobs) {
		out = append(out, field.Invalid(a.name, a.after.Job, fmt.Sprintf("would be job %d of Tenant %s, whose quota is %s (it has %s)",
			len(jobs)+1, t.Name, count(q.Jobs, "job"), strings.Join(jobs, ", "))))
	}
	var was int64
	if a.before != nil {
		was = a.before.GPUs
	}
	if q.GPUs > 0 && a.after.GPUs > was && used+a.after.GPUs > int64(q.GPUs) {
		list := ""
		if len(a.others) > 0 {
			list = " (" + describeClaims(a.others) + ")"
		}
		out = append(out, field.Invalid(a.gpus, a.gpusValue, fmt.Sprintf(
			"needs %s (%s), but Tenant %s's GPU quota is %d and its other %s use %d%s: %d left",
			count(a.after.GPUs, "GPU"), a.need, t.Name, q.GPUs, a.noun, used, list, max(0, int64(q.GPUs)-used))))
	}
	return out
}

// describeClaims words claims by job name: "qwen3-32b 2x1" (replicas x GPUs each), or
// "chat 3 GPUs" when the replicas are not all alike.
func describeClaims(claims []Claim) string {
	sorted := slices.Clone(claims)
	slices.SortFunc(sorted, func(a, b Claim) int { return strings.Compare(a.Job, b.Job) })
	parts := make([]string, len(sorted))
	for i, c := range sorted {
		if c.Replicas > 0 && c.GPUs%int64(c.Replicas) == 0 {
			parts[i] = fmt.Sprintf("%s %dx%d", c.Job, c.Replicas, c.GPUs/int64(c.Replicas))
		} else {
			parts[i] = c.Job + " " + count(c.GPUs, "GPU")
		}
	}
	return strings.Join(parts, ", ")
}

// count words n things: "1 replica", "3 replicas".
func count[N int32 | int64 | int](n N, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return strconv.FormatInt(int64(n), 10) + " " + what + "s"
}
