package render

import (
	"maps"
)

// Argo CD objects: our own small structs, proven against Argo CD's CRDs in the tests (Argo CD's
// Go module drags in k8s.io/kubernetes and does not resolve beside k8s.io v0.37).

const (
	ArgoCDAPIVersion = "argoproj.io/v1alpha1"
	// ResourcesFinalizer makes deleting an Application delete what it deployed.
	ResourcesFinalizer = "resources-finalizer.argocd.argoproj.io"
	// SyncWaveAnnotation orders a sync: lower waves are applied (and healthy) first.
	SyncWaveAnnotation = "argocd.argoproj.io/sync-wave"
)

// Application is an Argo CD Application.
type Application = object[ApplicationSpec]

// ApplicationSpec is the part of an Application's spec inferplane sets.
type ApplicationSpec struct {
	Project     string                 `json:"project"`
	Source      ApplicationSource      `json:"source"`
	Destination ApplicationDestination `json:"destination"`
	SyncPolicy  SyncPolicy             `json:"syncPolicy"`
	// IgnoreDifferences are fields others own in the cluster (e.g. a caBundle the webhook
	// writes itself), which a sync must leave alone.
	IgnoreDifferences []ResourceIgnoreDifferences `json:"ignoreDifferences,omitempty"`
}

// ResourceIgnoreDifferences names fields of a kind that Argo CD does not compare or sync.
type ResourceIgnoreDifferences struct {
	Group        string   `json:"group"`
	Kind         string   `json:"kind"`
	JSONPointers []string `json:"jsonPointers,omitempty"`
}

// ApplicationSource is a path in a git repository.
type ApplicationSource struct {
	RepoURL        string `json:"repoURL"`
	TargetRevision string `json:"targetRevision"`
	Path           string `json:"path"`
}

// ApplicationDestination is a cluster (by its Argo CD name) and a namespace.
type ApplicationDestination struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

// SyncPolicy is automated sync with retries.
type SyncPolicy struct {
	Automated                *SyncAutomated            `json:"automated,omitempty"`
	SyncOptions              []string                  `json:"syncOptions,omitempty"`
	ManagedNamespaceMetadata *ManagedNamespaceMetadata `json:"managedNamespaceMetadata,omitempty"`
	Retry                    *SyncRetry                `json:"retry,omitempty"`
}

// SyncAutomated: prune what left git, undo what changed in the cluster.
type SyncAutomated struct {
	Prune    bool `json:"prune"`
	SelfHeal bool `json:"selfHeal"`
}

// ManagedNamespaceMetadata labels the namespace CreateNamespace=true creates.
type ManagedNamespaceMetadata struct {
	Labels map[string]string `json:"labels,omitempty"`
}

// SyncRetry retries a failed sync with exponential backoff.
type SyncRetry struct {
	Limit   int64       `json:"limit"`
	Refresh bool        `json:"refresh,omitempty"`
	Backoff SyncBackoff `json:"backoff"`
}

// SyncBackoff is Argo CD's backoff: Duration, then times Factor, up to MaxDuration.
type SyncBackoff struct {
	Duration    string `json:"duration"`
	Factor      int64  `json:"factor"`
	MaxDuration string `json:"maxDuration"`
}

// Argo CD's own retry backoff defaults (5s, factor 2, at most 3m), spelled out so a reader of
// the repository sees them; the limit is ours (Argo CD has none by default).
const (
	RetryLimit       = 5
	RetryDuration    = "5s"
	RetryFactor      = 2
	RetryMaxDuration = "3m"
)

// applicationSpec is the spec of an Application that syncs one folder of the tenant's repo
// (a job's, or the add-ons), shared by the files in argocd/ and the inline applications in
// vcluster.yaml so the two can never differ.
func applicationSpec(t *tenant, dir string) ApplicationSpec {
	return ApplicationSpec{
		Project: t.name,
		Source: ApplicationSource{
			RepoURL:        t.opts.RepoURL,
			TargetRevision: t.opts.Revision,
			Path:           dir,
		},
		Destination: ApplicationDestination{Name: t.destination, Namespace: t.namespace},
		SyncPolicy: SyncPolicy{
			Automated: &SyncAutomated{Prune: true, SelfHeal: true},
			// CreateNamespace: the tenant namespace exists before any job's objects.
			SyncOptions:              []string{"CreateNamespace=true"},
			ManagedNamespaceMetadata: &ManagedNamespaceMetadata{Labels: maps.Clone(t.labels)},
			// Refresh: a retry picks up a fix pushed while the sync was failing.
			Retry: &SyncRetry{Limit: RetryLimit, Refresh: true, Backoff: SyncBackoff{
				Duration: RetryDuration, Factor: RetryFactor, MaxDuration: RetryMaxDuration,
			}},
		},
	}
}

// application is a job's Application. Its name carries the tenant: every tenant's
// Applications live side by side in one Argo CD namespace, and job names are unique only
// within a tenant.
func application(t *tenant, j *job) Application {
	return Application{
		APIVersion: ArgoCDAPIVersion,
		Kind:       "Application",
		Metadata: meta{
			Name:       applicationName(t.name, j.name),
			Namespace:  t.argoNamespace,
			Labels:     t.jobLabels(j),
			Finalizers: []string{ResourcesFinalizer},
		},
		Spec: applicationSpec(t, JobDir(j.name)),
	}
}

// AppProject is an Argo CD AppProject.
type AppProject = object[AppProjectSpec]

// AppProjectSpec confines a tenant's Applications to its repository, its cluster and
// namespace, and the kinds its jobs render.
type AppProjectSpec struct {
	Description                string                   `json:"description,omitempty"`
	SourceRepos                []string                 `json:"sourceRepos"`
	Destinations               []ApplicationDestination `json:"destinations"`
	ClusterResourceWhitelist   []GroupKind              `json:"clusterResourceWhitelist"`
	NamespaceResourceWhitelist []GroupKind              `json:"namespaceResourceWhitelist"`
}

// GroupKind names a kind in an allow-list.
type GroupKind struct {
	Group string `json:"group"`
	Kind  string `json:"kind"`
}

// The kinds a job folder holds, and the namespace CreateNamespace=true makes. Nothing else is
// allowed: a commit that adds, say, a ClusterRoleBinding to a tenant repo fails to sync.
var (
	clusterKinds = []GroupKind{
		{Group: "", Kind: "Namespace"},
		{Group: "inferplane.io", Kind: "ModelMaster"},
	}
	namespacedKinds = []GroupKind{
		{Group: "", Kind: "PersistentVolumeClaim"},
		{Group: "", Kind: "Secret"},
		{Group: "", Kind: "Service"},
		{Group: "inferplane.io", Kind: "ManagedInferenceJob"},
		{Group: "kubevirt.io", Kind: "VirtualMachine"},
	}
)

func appProject(t *tenant) AppProject {
	return AppProject{
		APIVersion: ArgoCDAPIVersion,
		Kind:       "AppProject",
		Metadata: meta{Name: t.name, Namespace: t.argoNamespace, Labels: maps.Clone(t.labels),
			Annotations: map[string]string{SyncWaveAnnotation: AppProjectSyncWave}},
		Spec: AppProjectSpec{
			Description:                "inferplane tenant " + t.name,
			SourceRepos:                []string{t.opts.RepoURL},
			Destinations:               []ApplicationDestination{{Name: t.destination, Namespace: t.namespace}},
			ClusterResourceWhitelist:   clusterKinds,
			NamespaceResourceWhitelist: namespacedKinds,
		},
	}
}
