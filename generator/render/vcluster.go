package render

import "fmt"

// The vCluster v0.36 values inferplane sets: our own small structs rather than vCluster's Go
// module (which has no go.mod of its own and pulls in about a thousand packages). Every field
// here exists in vCluster's values.schema.json; the tests validate the output against it.

// VClusterValues is a tenant's vcluster.yaml.
type VClusterValues struct {
	PrivateNodes VClusterPrivateNodes `json:"privateNodes"`
	Integrations VClusterIntegrations `json:"integrations"`
	Deploy       *VClusterDeploy      `json:"deploy,omitempty"`
	Policies     *VClusterPolicies    `json:"policies,omitempty"`
}

// VClusterPrivateNodes: the tenant's GPU nodes join its cluster as its own worker nodes.
type VClusterPrivateNodes struct {
	Enabled bool `json:"enabled"`
}

// VClusterIntegrations holds the Argo CD integration.
type VClusterIntegrations struct {
	ArgoCD *VClusterArgoCDIntegration `json:"argoCD,omitempty"`
}

// VClusterArgoCDIntegration registers the tenant cluster with the Argo CD of a Platform
// connector.
type VClusterArgoCDIntegration struct {
	Enabled   bool   `json:"enabled"`
	Connector string `json:"connector,omitempty"`
}

// VClusterDeploy holds what vCluster deploys into the tenant cluster.
type VClusterDeploy struct {
	ArgoCD VClusterArgoCDDeploy `json:"argoCD"`
}

// VClusterArgoCDDeploy lists the Argo CD applications of the tenant cluster.
type VClusterArgoCDDeploy struct {
	Applications []VClusterArgoCDApplication `json:"applications"`
}

// VClusterArgoCDApplication is one application. Target is "vCluster" (the tenant cluster) or
// "host"; Inline is an Argo CD Application spec.
type VClusterArgoCDApplication struct {
	Name        string           `json:"name"`
	DisplayName string           `json:"displayName,omitempty"`
	Target      string           `json:"target"`
	Inline      *ApplicationSpec `json:"inline,omitempty"`
}

// TargetVCluster is the application target of the tenant cluster. vCluster Platform rejects
// the lowercase "vcluster" some docs show; its schema does not (it is a plain string).
const TargetVCluster = "vCluster"

// VClusterPolicies holds the tenant's quota.
type VClusterPolicies struct {
	ResourceQuota VClusterResourceQuota `json:"resourceQuota"`
}

// VClusterResourceQuota is vCluster's quota: Quota maps resource names to limits.
type VClusterResourceQuota struct {
	Enabled bool             `json:"enabled"`
	Quota   map[string]int32 `json:"quota"`
}

// GPUQuotaResource is the generic GPU resource a quota limits next to the node types' own.
const GPUQuotaResource = "nvidia.com/gpu"

// vclusterValues builds vcluster.yaml: private nodes, the Argo CD connector, one application
// per job (inline, so the repository alone says what is deployed: a template would point at
// an ArgoCDApplicationTemplate that lives outside it), and the GPU quota.
func vclusterValues(t *tenant, addons *staticAddons) VClusterValues {
	v := VClusterValues{PrivateNodes: VClusterPrivateNodes{Enabled: true}}
	if t.connector != "" {
		v.Integrations.ArgoCD = &VClusterArgoCDIntegration{Enabled: true, Connector: t.connector}
		// vCluster refuses applications without a connector: the add-ons are listed only
		// when there is one (a tenant with jobs must have one).
		spec := addonsApplicationSpec(t, addons)
		v.Deploy = &VClusterDeploy{ArgoCD: VClusterArgoCDDeploy{Applications: []VClusterArgoCDApplication{{
			Name:        addonsName(t.name),
			DisplayName: "inferplane add-ons (CRDs, policy data, admission webhook)",
			Target:      TargetVCluster,
			Inline:      &spec,
		}}}}
	}
	if len(t.jobs) > 0 {
		for i := range t.jobs {
			j := &t.jobs[i]
			spec := applicationSpec(t, JobDir(j.name))
			v.Deploy.ArgoCD.Applications = append(v.Deploy.ArgoCD.Applications, VClusterArgoCDApplication{
				Name:        j.name,
				DisplayName: displayName(j),
				Target:      TargetVCluster,
				Inline:      &spec,
			})
		}
	}
	if q := resourceQuota(t); q > 0 {
		quota := map[string]int32{"requests." + GPUQuotaResource: q}
		for i := range t.nodeTypes {
			quota["requests."+t.nodeTypes[i].Spec.GPU.ResourceName] = q
		}
		v.Policies = &VClusterPolicies{ResourceQuota: VClusterResourceQuota{Enabled: true, Quota: quota}}
	}
	return v
}

// resourceQuota is the GPUs the tenant cluster's ResourceQuota allows: the tenant's GPU
// quota in force, or what its jobs claim when that is more. The plan admits jobs over the
// quota only when they ran so before it was lowered (policy.CheckJobQuota keeps what runs):
// the cluster must then still let their VMs restart, while no job may grow.
func resourceQuota(t *tenant) int32 {
	q := t.spec.Quota
	if q == nil || q.GPUs <= 0 {
		return 0
	}
	var claimed int32
	for i := range t.jobs {
		j := &t.jobs[i]
		claimed += j.replicas * j.nodes * j.gpusPerNode
	}
	return max(q.GPUs, claimed)
}

func displayName(j *job) string {
	model := j.p.Master.Spec.Model
	if model == "" {
		model = j.master
	}
	return fmt.Sprintf("%s (%s, %d x %d GPUs)", j.name, model, j.replicas, j.nodes*j.gpusPerNode)
}
