// Package bench measures the generator's render against the tool a platform team would reach
// for instead: Helm's template engine (helm.sh/helm/v3/pkg/engine) rendering the same objects
// from a chart of equivalent templates. The chart lives in chart/; Equivalent proves, object by
// object, that both sides render the same tree before any time is compared.
package bench

import (
	"cmp"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"

	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render"
)

//go:embed all:chart
var chartFS embed.FS

// Chart is the Helm chart that renders a tenant's tree: templates equivalent to package
// render's Go code, read from the embedded chart/ folder.
func Chart() (*chart.Chart, error) {
	c := &chart.Chart{Metadata: &chart.Metadata{APIVersion: chart.APIVersionV2, Name: "inferplane-tenant", Version: "0.1.0"}}
	err := fs.WalkDir(chartFS, "chart/templates", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := chartFS.ReadFile(p)
		if err != nil {
			return err
		}
		c.Templates = append(c.Templates, &chart.File{Name: path.Join("templates", path.Base(p)), Data: data})
		return nil
	})
	return c, err
}

// Values turns a tenant plan into the chart's values. Everything the Go render computes from
// the plan with more than string and list handling (VM sizes, defaults) is computed here,
// ValuesOf is Values of every tenant, in order: the untimed preparation of a Helm run.
func ValuesOf(tenants []plan.TenantPlan, opts render.Options) ([]map[string]any, error) {
	out := make([]map[string]any, len(tenants))
	for i, tp := range tenants {
		v, err := Values(tp, opts)
		if err != nil {
			return nil, err
		}
		out[i] = v
	}
	return out, nil
}

// outside the timed part, which only favours Helm.
//
// Values computes what the chart cannot: the GPUs the tenant cluster's ResourceQuota allows
// (resourceQuota).
func Values(tp plan.TenantPlan, opts render.Options) (map[string]any, error) {
	t := tp.Tenant
	repo := cmp.Or(opts.RepoURL, t.Spec.Git.URL)
	rev := cmp.Or(opts.Revision, t.Spec.Git.Branch, render.DefaultRevision)

	tenant := map[string]any{
		"name":          t.Name,
		"namespace":     t.Name,
		"displayName":   t.Spec.DisplayName,
		"allowAll":      t.Spec.AllowedNodeTypes == nil,
		"allowed":       anyList(t.Spec.AllowedNodeTypes),
		"gpuQuota":      resourceQuota(tp),
		"spec":          mapOf(t.Spec),
		"argoNamespace": cmp.Or(t.Spec.ArgoCD.Namespace, render.DefaultArgoCDNamespace),
		"destination":   cmp.Or(t.Spec.ArgoCD.Destination, t.Name),
		"connector":     t.Spec.ArgoCD.Connector,
		"repoURL":       repo,
		"revision":      rev,
	}
	var nodeTypes []any
	for _, nt := range tp.NodeTypes {
		nodeTypes = append(nodeTypes, map[string]any{"name": nt.Name, "resourceName": nt.Spec.GPU.ResourceName, "spec": mapOf(nt.Spec)})
	}
	var jobs []any
	for i := range tp.Jobs {
		j, err := jobValues(&tp.Jobs[i], opts)
		if err != nil {
			return nil, err
		}
		jobs = append(jobs, j)
	}
	addons, err := render.Addons(opts)
	if err != nil {
		return nil, err
	}
	kinds := func(list []render.GroupKind) []any {
		out := make([]any, 0, len(list))
		for _, gk := range list {
			out = append(out, map[string]any{"group": gk.Group, "kind": gk.Kind})
		}
		return out
	}
	return map[string]any{
		"tenant":    tenant,
		"nodeTypes": nodeTypes,
		"jobs":      jobs,
		"addons": map[string]any{
			"namespace":       addons.Namespace,
			"caBundles":       anyList(addons.CABundlePointers),
			"clusterKinds":    kinds(addons.ClusterKinds),
			"namespacedKinds": kinds(addons.NamespacedKinds),
		},
		"opts": map[string]any{
			"hfTokenSecret": cmp.Or(opts.HFTokenSecret, render.DefaultHFTokenSecret),
			"clusterDomain": cmp.Or(opts.ClusterDomain, render.DefaultClusterDomain),
			"storageClass":  opts.StorageClass,
		},
	}, nil
}

// jobValues are one job's values (see Values).
func jobValues(jp *plan.JobPlan, opts render.Options) (map[string]any, error) {
	nt := &jp.NodeType
	cpu, mem, err := render.VMShare(nt, jp.GPUsPerNode)
	if err != nil {
		return nil, err
	}
	runtime := string(jp.Job.Spec.EffectiveRuntime())
	image := jp.Image
	if image == "" {
		image = map[string]string{"vllm": "vllm/vllm-openai:latest", "parakeet": "ghcr.io/inferplane/parakeet-openai:0.6b-v3"}[runtime]
	}
	model := jp.Master.Spec.Model
	if model == "" {
		model = jp.Master.Name
	}
	var ib any
	if nt.Spec.InfiniBand != nil {
		ib = map[string]any{"resourceName": nt.Spec.InfiniBand.ResourceName, "count": nt.Spec.InfiniBand.Count}
	}
	fabric := cmp.Or(opts.FabricNetwork, render.DefaultFabricNetwork)
	if nt.Spec.InfiniBand != nil && nt.Spec.InfiniBand.Network != "" {
		fabric = nt.Spec.InfiniBand.Network
	}
	var env []any
	for _, e := range jp.Env {
		env = append(env, map[string]any{"name": e.Name, "value": e.Value})
	}
	return map[string]any{
		"name":          jp.Job.Name,
		"runtime":       runtime,
		"master":        jp.Master.Name,
		"masterSpec":    mapOf(jp.Master.Spec),
		"jobSpec":       mapOf(jp.Job.Spec),
		"jobLabels":     jp.Job.Labels,
		"model":         jp.Master.Spec.Model,
		"displayModel":  model,
		"image":         image,
		"args":          anyList(jp.Args),
		"env":           env,
		"replicas":      jp.Job.Spec.Replicas,
		"nodes":         jp.NodesPerReplica,
		"gpusPerNode":   jp.GPUsPerNode,
		"dpLocal":       jp.DataParallelLocal,
		"perReplica":    jp.NodesPerReplica * jp.GPUsPerNode,
		"nodeType":      nt.Name,
		"resourceName":  nt.Spec.GPU.ResourceName,
		"selector":      nt.Selector(),
		"rack":          nt.Rack(),
		"ib":            ib,
		"fabric":        fabric,
		"guestImage":    cmp.Or(nt.Spec.GuestImage, opts.GuestImage, render.DefaultGuestImage),
		"cpu":           cpu,
		"memory":        mem.String(),
		"cache":         cmp.Or(jp.ModelCacheSize, jp.Job.Spec.ModelCacheSize, render.DefaultModelCacheSize),
		"requireAPIKey": jp.Job.Spec.APIKeyRequired(),
	}, nil
}

// RenderHelm renders one tenant the way `helm template` does: values coalesced with the
// chart's, then every template executed.
func RenderHelm(c *chart.Chart, values map[string]any, tenant string) (map[string]string, error) {
	vals, err := chartutil.ToRenderValues(c, values, chartutil.ReleaseOptions{Name: tenant, Namespace: tenant, IsInstall: true}, nil)
	if err != nil {
		return nil, err
	}
	return engine.Render(c, vals)
}

func anyList(l []string) []any {
	if l == nil {
		return nil
	}
	out := make([]any, len(l))
	for i, s := range l {
		out[i] = s
	}
	return out
}

// mapOf turns a typed spec into the generic map a Helm chart receives as values.
func mapOf(v any) map[string]any {
	b, err := json.Marshal(v)
	if err != nil {
		panic(fmt.Sprintf("bench: marshal %T: %v", v, err)) // our own API types always marshal
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		panic(err)
	}
	return m
}

// resourceQuota is the tenant's GPU quota in force, or what its jobs claim when that is more
// (as render's vcluster.yaml has it); 0 for none.
func resourceQuota(tp plan.TenantPlan) int32 {
	q := tp.Tenant.Spec.Quota
	if q == nil || q.GPUs <= 0 {
		return 0
	}
	var claimed int32
	for _, j := range tp.Jobs {
		claimed += j.Job.Spec.Replicas * j.NodesPerReplica * j.GPUsPerNode
	}
	return max(q.GPUs, claimed)
}
