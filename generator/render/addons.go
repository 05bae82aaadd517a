package render

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/kustomize/api/types"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/config/crd"
	"github.com/inferplane/inferplane/webhook/install"
)

// The tenant cluster's add-ons: what must be in it before any job syncs. inferplane's CRDs (so
// jobs and masters can be stored), the policy data the webhook reads (the Tenant and the node
// types its jobs use), and the admission webhook itself. One Application syncs the folder, in
// an AppProject of its own: the jobs' project allows only the kinds a job renders, so a commit
// to a job folder still cannot add cluster-wide RBAC.
const (
	AddonsDir             = "addons"
	FileAddonsKustomize   = AddonsDir + "/kustomization.yaml"
	FileCRDs              = AddonsDir + "/crds.yaml"
	FileTenant            = AddonsDir + "/tenant.yaml"
	FileNodeTypes         = AddonsDir + "/nodetypes.yaml"
	FileWebhook           = AddonsDir + "/webhook.yaml"
	FileAddonsApplication = "argocd/addons.yaml"
	FileAddonsAppProject  = "argocd/appproject-addons.yaml"

	// AddonsSyncWave puts the add-ons before the jobs (wave 0) when one sync applies both.
	AddonsSyncWave = "-1"
	// AppProjectSyncWave puts the AppProjects before every Application that names them: an
	// app-of-apps over argocd/ that waits for each wave to be healthy would otherwise wait
	// forever on the add-ons (wave -1), whose project (wave 0) does not exist yet.
	AppProjectSyncWave = "-2"
	// PolicyDataSyncWave puts the add-ons' Tenant and NodeTypes after the CRDs that define
	// them (wave 0): Argo CD applies a wave only once the one before is healthy, which for a
	// CRD means established; in one wave the objects race their CRDs and the sync fails.
	PolicyDataSyncWave = "1"
)

// WebhookConfigurationSyncWave registers the webhook last, once the webhook's Deployment
// (wave 0) is available and the policy data it reads (wave 1) is in place: the API server
// never calls a webhook that cannot answer yet.
const WebhookConfigurationSyncWave = "2"

func policyDataWave() map[string]string {
	return map[string]string{SyncWaveAnnotation: PolicyDataSyncWave}
}

// addonsName names the add-ons' Application and AppProject after the tenant.
func addonsName(tenant string) string { return tenant + "-addons" }

// staticAddons are the add-on files that do not depend on the tenant: the CRDs and the
// webhook install. They are the same bytes for every tenant of a run, so they are encoded once
// per set of webhook options rather than once per tenant (they are most of the add-ons' bytes).
type staticAddons struct {
	crds, webhook []byte
	// kinds are the webhook install's kinds, split by scope, for the add-ons' AppProject.
	clusterKinds, namespacedKinds []GroupKind
	namespace                     string
	// caBundles point at each webhook's caBundle, which the webhook fills in itself.
	caBundles []string
}

var staticCache sync.Map // key: JSON of install.ManifestOptions → *staticAddons

func addonsFor(o install.ManifestOptions) (*staticAddons, error) {
	key, err := json.Marshal(o)
	if err != nil {
		return nil, err
	}
	if s, ok := staticCache.Load(string(key)); ok {
		return s.(*staticAddons), nil
	}
	crds, err := crd.Read(crd.TenantCluster...)
	if err != nil {
		return nil, fmt.Errorf("inferplane CRDs: %w", err)
	}
	objs, err := install.Manifests(o)
	if err != nil {
		return nil, err
	}
	for _, obj := range objs {
		if _, ok := obj.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
			a := maps.Clone(obj.GetAnnotations())
			if a == nil {
				a = map[string]string{}
			}
			a[SyncWaveAnnotation] = WebhookConfigurationSyncWave
			obj.SetAnnotations(a)
		}
	}
	y, err := install.YAML(objs)
	if err != nil {
		return nil, err
	}
	s := &staticAddons{crds: bytes.Join(crds, nil), webhook: y}
	s.clusterKinds, s.namespacedKinds, s.namespace = kindsOf(objs)
	if o.URL != "" {
		// The webhook runs outside the tenant cluster and the add-ons are cluster-scoped only:
		// an empty (not absent) list allows no namespaced kind at all, and the Application
		// still names the namespace an in-cluster install would use. The CA is the one in git.
		s.namespacedKinds = []GroupKind{}
		s.namespace = cmp.Or(o.Namespace, install.DefaultNamespace)
	} else {
		for _, o := range objs {
			if c, ok := o.(*admissionregistrationv1.ValidatingWebhookConfiguration); ok {
				for i := range c.Webhooks {
					s.caBundles = append(s.caBundles, fmt.Sprintf("/webhooks/%d/clientConfig/caBundle", i))
				}
			}
		}
	}
	if s.namespace == "" {
		return nil, fmt.Errorf("webhook install has no namespaced object: the add-ons need its Namespace")
	}
	s.clusterKinds = appendKind(s.clusterKinds,
		GroupKind{Group: "apiextensions.k8s.io", Kind: "CustomResourceDefinition"},
		GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindTenant},
		GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindNodeType})
	staticCache.Store(string(key), s)
	return s, nil
}

// kindsOf lists the kinds of objs by scope (an object without a namespace is cluster-scoped),
// and the namespace the namespaced ones live in.
func kindsOf(objs []client.Object) (cluster, namespaced []GroupKind, namespace string) {
	for _, o := range objs {
		gvk := o.GetObjectKind().GroupVersionKind()
		gk := GroupKind{Group: gvk.Group, Kind: gvk.Kind}
		if o.GetNamespace() == "" {
			cluster = appendKind(cluster, gk)
		} else {
			namespaced = appendKind(namespaced, gk)
			namespace = o.GetNamespace()
		}
	}
	return cluster, namespaced, namespace
}

func appendKind(list []GroupKind, gks ...GroupKind) []GroupKind {
	for _, gk := range gks {
		if !slices.Contains(list, gk) {
			list = append(list, gk)
		}
	}
	slices.SortFunc(list, func(a, b GroupKind) int {
		if a.Group != b.Group {
			return strings.Compare(a.Group, b.Group)
		}
		return strings.Compare(a.Kind, b.Kind)
	})
	return list
}

// addonsKustomization lists the add-on files in apply order.
func addonsKustomization() types.Kustomization {
	return types.Kustomization{
		TypeMeta:  types.TypeMeta{APIVersion: types.KustomizationVersion, Kind: types.KustomizationKind},
		Resources: []string{"crds.yaml", "tenant.yaml", "nodetypes.yaml", "webhook.yaml"},
	}
}

// addonsApplicationSpec syncs the add-ons folder into the tenant cluster. The webhook writes
// its own CA bundle into its configuration at run time, so Argo CD must not undo that.
func addonsApplicationSpec(t *tenant, s *staticAddons) ApplicationSpec {
	spec := applicationSpec(t, AddonsDir)
	spec.Project = addonsName(t.name)
	spec.Destination.Namespace = s.namespace
	spec.SyncPolicy.ManagedNamespaceMetadata = nil
	spec.SyncPolicy.SyncOptions = []string{"ServerSideApply=true", "RespectIgnoreDifferences=true"}
	if len(s.caBundles) > 0 {
		spec.IgnoreDifferences = []ResourceIgnoreDifferences{{
			Group:        admissionregistrationv1.GroupName,
			Kind:         "ValidatingWebhookConfiguration",
			JSONPointers: s.caBundles,
		}}
	}
	return spec
}

func addonsApplication(t *tenant, s *staticAddons) Application {
	return Application{
		APIVersion: ArgoCDAPIVersion,
		Kind:       "Application",
		Metadata: meta{
			Name:        addonsName(t.name),
			Namespace:   t.argoNamespace,
			Labels:      maps.Clone(t.labels),
			Annotations: map[string]string{SyncWaveAnnotation: AddonsSyncWave},
			Finalizers:  []string{ResourcesFinalizer},
		},
		Spec: addonsApplicationSpec(t, s),
	}
}

func addonsAppProject(t *tenant, s *staticAddons) AppProject {
	return AppProject{
		APIVersion: ArgoCDAPIVersion,
		Kind:       "AppProject",
		Metadata: meta{Name: addonsName(t.name), Namespace: t.argoNamespace, Labels: maps.Clone(t.labels),
			Annotations: map[string]string{SyncWaveAnnotation: AppProjectSyncWave}},
		Spec: AppProjectSpec{
			Description:                "inferplane add-ons of tenant " + t.name,
			SourceRepos:                []string{t.opts.RepoURL},
			Destinations:               []ApplicationDestination{{Name: t.destination, Namespace: s.namespace}},
			ClusterResourceWhitelist:   s.clusterKinds,
			NamespaceResourceWhitelist: s.namespacedKinds,
		},
	}
}

// AddonsSummary is what the add-ons' Argo CD objects say about the webhook install: where it
// runs, which kinds it has, where its CA bundles are. The benchmark's Helm chart takes it as
// values, the way it takes other figures the Go render computes.
type AddonsSummary struct {
	Namespace                     string
	ClusterKinds, NamespacedKinds []GroupKind
	CABundlePointers              []string
}

// Addons summarises the add-ons rendered with opts.
func Addons(opts Options) (AddonsSummary, error) {
	s, err := addonsFor(opts.Webhook)
	if err != nil {
		return AddonsSummary{}, err
	}
	return AddonsSummary{Namespace: s.namespace, ClusterKinds: s.clusterKinds, NamespacedKinds: s.namespacedKinds,
		CABundlePointers: s.caBundles}, nil
}
