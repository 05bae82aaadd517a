// Package render turns a tenant's plan into the files of its GitOps repository. It is pure: no
// file system, git or network access; the same plan always gives the same bytes.
//
// The work is a pipeline of small pure steps: check the plan and options (all problems at
// once), build typed objects per part of the tree (vCluster values, Platform project, policy
// data, Argo CD objects, one job folder per job), then encode each file as YAML.
package render

import (
	"cmp"
	"fmt"
	"path"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/generator/plan"
	"github.com/inferplane/inferplane/generator/render/internal/fastyaml"
	"github.com/inferplane/inferplane/webhook/install"
)

// Files is a rendered repository: slash-separated paths relative to the repo root, to content.
type Files map[string][]byte

// Options are the settings that are not part of the inputs. The zero value of every field but
// RepoURL is usable; see each field for its default.
type Options struct {
	// RepoURL is the URL Argo CD pulls the tenant's repo from (the tenant's git URL, or a
	// placeholder for the embedded default). Empty: the tenant's spec.git.url; when that is
	// empty too, Tenant fails, since Argo CD cannot sync from nowhere.
	RepoURL string
	// Revision is the branch Argo CD tracks. Empty: the tenant's spec.git.branch, else "main".
	Revision string

	// GuestImage is the golden VM disk (containerDisk image) for node types that name none.
	// Empty: DefaultGuestImage.
	GuestImage string
	// StorageClass is the storage class of the model-cache PVCs. Empty: the tenant cluster's
	// default class.
	StorageClass string
	// HFTokenSecret names the Secret (key "token") the operator creates in the tenant's
	// namespace to let guests download gated models. It is attached to every VM as an optional
	// disk: the token value never appears in the repository. Empty: DefaultHFTokenSecret.
	HFTokenSecret string
	// FabricNetwork is the Multus NetworkAttachmentDefinition multi-node replicas talk over
	// when their node type names none (spec.infiniBand.network). Empty: DefaultFabricNetwork.
	FabricNetwork string
	// ClusterDomain is the tenant cluster's DNS domain, used in the head node's address that
	// workers of a multi-node replica dial. Empty: "cluster.local".
	ClusterDomain string
	// Webhook shapes the admission webhook installed with the tenant cluster's add-ons (image,
	// replicas, namespace); the zero value is the webhook package's defaults. With URL set,
	// the webhook runs outside the tenant cluster and the add-ons hold only its configuration
	// (pointing at URL, with CABundle), no Deployment.
	Webhook install.ManifestOptions
}

// Defaults for Options fields left empty.
const (
	// DefaultGuestImage is a golden guest disk with the NVIDIA driver, the NVIDIA container
	// toolkit and Docker (docs/rendering.md lists what the guest must provide).
	DefaultGuestImage    = "ghcr.io/inferplane/gpu-guest:ubuntu-24.04"
	DefaultHFTokenSecret = "hf-token"
	DefaultFabricNetwork = "inferplane-fabric"
	DefaultRevision      = "main"
	DefaultClusterDomain = "cluster.local"
	// DefaultModelCacheSize is the model-cache volume of a job whose plan names no size.
	DefaultModelCacheSize = "200Gi"
	// DefaultArgoCDNamespace is where Argo CD runs when the tenant names no namespace.
	DefaultArgoCDNamespace = "argocd"
)

// withDefaults fills the empty options from the tenant and the package defaults.
func (o Options) withDefaults(tp *plan.TenantPlan) Options {
	o.RepoURL = cmp.Or(o.RepoURL, tp.Tenant.Spec.Git.URL)
	o.Revision = cmp.Or(o.Revision, tp.Tenant.Spec.Git.Branch, DefaultRevision)
	o.GuestImage = cmp.Or(o.GuestImage, DefaultGuestImage)
	o.HFTokenSecret = cmp.Or(o.HFTokenSecret, DefaultHFTokenSecret)
	o.FabricNetwork = cmp.Or(o.FabricNetwork, DefaultFabricNetwork)
	o.ClusterDomain = cmp.Or(o.ClusterDomain, DefaultClusterDomain)
	return o
}

// Tenant renders one tenant's repository. On any problem it returns every problem found (a
// problem.Errors naming the input file and field) and no files.
func Tenant(tp plan.TenantPlan, opts Options) (Files, error) {
	opts = opts.withDefaults(&tp)
	t, err := resolve(&tp, opts)
	if err != nil {
		return nil, err
	}
	files := Files{}
	add := func(name string, objs ...any) error {
		b, err := encode(objs...)
		if err != nil {
			// Only a type that cannot be marshalled gets here: a programming error, not input.
			return fmt.Errorf("render %s for tenant %s: %w", name, t.name, err)
		}
		files[name] = b
		return nil
	}

	addons, err := addonsFor(opts.Webhook)
	if err != nil {
		return nil, fmt.Errorf("render add-ons for tenant %s: %w", t.name, err)
	}
	if err := add(FileVCluster, vclusterValues(t, addons)); err != nil {
		return nil, err
	}
	if err := add(FileProject, project(t)); err != nil {
		return nil, err
	}
	if err := add(FileAddonsKustomize, addonsKustomization()); err != nil {
		return nil, err
	}
	files[FileCRDs] = addons.crds
	files[FileWebhook] = addons.webhook
	if err := add(FileTenant, tenantObject(t)); err != nil {
		return nil, err
	}
	if len(t.nodeTypes) == 0 {
		// kustomize needs every listed file to hold an object list, even an empty one.
		files[FileNodeTypes] = []byte("# The tenant has no jobs, so no node types are in use.\n")
	} else if err := add(FileNodeTypes, nodeTypeObjects(t)...); err != nil {
		return nil, err
	}
	if err := add(FileAddonsAppProject, addonsAppProject(t, addons)); err != nil {
		return nil, err
	}
	if err := add(FileAddonsApplication, addonsApplication(t, addons)); err != nil {
		return nil, err
	}
	if err := add(FileAppProject, appProject(t)); err != nil {
		return nil, err
	}
	for i := range t.jobs {
		j := &t.jobs[i]
		if err := add(ApplicationFile(j.name), application(t, j)); err != nil {
			return nil, err
		}
		for _, f := range jobFiles(t, j) {
			if err := add(path.Join(JobDir(j.name), f.name), f.obj); err != nil {
				return nil, err
			}
		}
	}
	return files, nil
}

// Paths of the rendered tree (docs/design.md, "Rendered tree").
const (
	FileVCluster   = "vcluster.yaml"
	FileProject    = "platform/project.yaml"
	FileAppProject = "argocd/appproject.yaml"
)

// ApplicationFile is the path of a job's Argo CD Application.
func ApplicationFile(job string) string { return "argocd/applications/" + job + ".yaml" }

// JobDir is the folder of a job's workload objects, the path its Application syncs.
func JobDir(job string) string { return "jobs/" + job }

// JobFile is the file of a job folder that holds the ManagedInferenceJob.
const JobFile = "job.yaml"

// ApplicationName is the name of a job's Application, in the tenant's ArgoCDNamespace.
func ApplicationName(tenant, job string) string { return applicationName(tenant, job) }

// ArgoCDNamespace is where Argo CD runs on the host cluster and keeps a tenant's Applications.
func ArgoCDNamespace(t *v1alpha1.TenantSpec) string {
	return cmp.Or(t.ArgoCD.Namespace, DefaultArgoCDNamespace)
}

// Destination is the Argo CD cluster name of a tenant's cluster, where its jobs sync to.
func Destination(tenant string, t *v1alpha1.TenantSpec) string {
	return cmp.Or(t.ArgoCD.Destination, tenant)
}

// encode writes objects as one YAML stream, "---" between documents: the bytes
// internal/manifest.Encode (sigs.k8s.io/yaml) writes, made by fastyaml, which spends far less
// time (the render's benchmark budget went to YAML encoding; docs/rendering.md has the figures).
func encode(objs ...any) ([]byte, error) {
	var buf []byte
	for i, o := range objs {
		b, err := fastyaml.Marshal(o)
		if err != nil {
			return nil, err
		}
		if i > 0 {
			buf = append(buf, "---\n"...)
		}
		if len(objs) == 1 {
			return b, nil
		}
		buf = append(buf, b...)
	}
	return buf, nil
}
