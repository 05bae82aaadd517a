package argocd_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	"github.com/inferplane/inferplane/e2e/argocd"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/policy"
)

// host is the cluster Argo CD runs in.
var host *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &host)) }

// Bounds on waiting for Argo CD; generous because the machine is shared (they bound a wait, they
// assert nothing about speed). The first sync of every tenant (three API servers, their
// controller managers, Argo CD's repo server and controller, all processes on two cores) waits
// as long as the Applications keep moving (firstSyncIdle without a move ends it), up to
// firstSyncTimeout: with another `make test` beside it that took more than 10 minutes.
const (
	firstSyncIdle    = 5 * time.Minute
	firstSyncTimeout = 18 * time.Minute
	syncTimeout      = 5 * time.Minute
)

// TestGitOpsThroughArgoCD: the GitOps path for real. `generate` renders the bundled examples,
// the real Argo CD (repo server, application controller) syncs every tenant's repository into
// that tenant's own API server through inferplane's webhook, and then follows the changes an
// operator makes. The subtests share one world and run in order, each leaving it synced.
func TestGitOpsThroughArgoCD(t *testing.T) {
	w := newWorld(t)
	for _, st := range []struct {
		name string
		run  func(*testing.T, *world)
	}{
		{"EveryTenantSyncs", testEveryTenantSyncs},
		{"HandEditRaisingGPUsIsDeniedByTheWebhook", testHandEditDenied},
		{"RemovedJobIsPruned", testRemovedJobIsPruned},
		{"ReplicasTwoToOneRemovesOnlyTheSecondReplica", testReplicasTwoToOne},
	} {
		if !t.Run(st.name, func(t *testing.T) { st.run(t, w) }) {
			t.Fatalf("%s failed: the later subtests build on it", st.name)
		}
	}
}

// testEveryTenantSyncs: every Application of every bundled tenant (add-ons and jobs, through an
// app-of-apps over argocd/) is Synced with its operation Succeeded, the add-ons landed before
// the jobs' Applications were created, and every rendered object is in its tenant's cluster
// with our labels.
func testEveryTenantSyncs(t *testing.T, w *world) {
	apps := w.waitAllSynced(t, firstSyncIdle, firstSyncTimeout)
	ctx := context.Background()
	for _, name := range bundledTenants {
		tn := w.tenants[name]
		addons := apps[name+"-addons"]
		require.NotNil(t, addons)
		// Add-ons hold CRDs, policy data and the webhook configuration: all healthy at once.
		assert.Equal(t, argocd.Healthy, addons.Status.Health.Status, addons.String())
		// Their sync waves (CRDs, then the Tenant and NodeTypes, then the webhook configuration)
		// let the first attempt succeed: in one wave the policy data races its CRDs and fails.
		assert.Zero(t, addons.Status.OperationState.RetryCount, "the add-ons needed retries: %s", addons.String())
		for _, appName := range w.renderedApps(t, name) {
			app := apps[appName]
			if app == addons {
				continue
			}
			// Wave -1 and the Application health check (config/argocd): the root app created
			// the job's Application only after the add-ons had synced.
			assert.False(t, app.Metadata.CreationTimestamp.Before(addons.FirstDeployedAt().Truncate(time.Second)),
				"%s created at %s, before the add-ons were first synced at %s", appName,
				app.Metadata.CreationTimestamp, addons.FirstDeployedAt())
			// Nothing runs VMs here (no virt-controller, no nodes): a VM never reports Ready and
			// a model-cache PVC is never bound, so Argo CD rates the job Progressing, as it would
			// while a real VM boots and loads its model.
			assert.Equal(t, argocd.Progressing, app.Status.Health.Status, app.String())
		}

		kinds := map[string]int{}
		for _, want := range append(w.renderedObjects(t, name, "addons"), w.renderedObjects(t, name, "jobs")...) {
			live := getLive(ctx, t, tn, want)
			require.NotNil(t, live, "%s not in tenant cluster %s", kubeenv.Describe(want), name)
			for k, v := range want.GetLabels() {
				assert.Equal(t, v, live.GetLabels()[k], "%s: label %s", kubeenv.Describe(want), k)
			}
			kinds[want.GetKind()]++
		}
		if hasJobs := kinds["ManagedInferenceJob"] > 0; hasJobs {
			for _, k := range []string{"VirtualMachine", "Service", "PersistentVolumeClaim", "Secret", "ManagedInferenceJob", "ModelMaster"} {
				assert.Positive(t, kinds[k], "tenant %s: no %s synced", name, k)
			}
		}
		t.Logf("tenant %s: %v synced into its own cluster", name, kinds)
	}
}

// testHandEditDenied: a commit that gives one VM a second GPU by hand (what a mistaken human
// edit would do) reaches Argo CD, whose sync is refused by the webhook: the Application's
// operation carries the webhook's denial, and the VM in the cluster is unchanged. `generate`
// then puts the file back, and the retry (refresh: true) syncs the fix.
func testHandEditDenied(t *testing.T, w *world) {
	ctx := context.Background()
	tn := w.tenants["acme"]
	const app, vmName, vmFile = "acme-qwen3-32b", "qwen3-32b-r0-n0", "jobs/qwen3-32b/r0-n0-vm.yaml"
	var before kubevirtv1.VirtualMachine
	require.NoError(t, tn.cluster.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: vmName}, &before))

	path := filepath.Join(w.out, "acme", vmFile)
	data, err := os.ReadFile(path)
	require.NoError(t, err)
	var vm kubevirtv1.VirtualMachine
	require.NoError(t, yaml.Unmarshal(data, &vm))
	gpus := &vm.Spec.Template.Spec.Domain.Devices.GPUs
	*gpus = append(*gpus, kubevirtv1.GPU{Name: "gpu-extra", DeviceName: (*gpus)[0].DeviceName})
	edited, err := yaml.Marshal(&vm)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(path, edited, 0o644))
	w.git(t, "acme", "commit", "-q", "-am", "Give "+vmName+" a second GPU by hand")
	rev := w.head(t, "acme")

	// What the webhook says about this VM: the same policy, offline, over the edited tree.
	denial := expectedDenial(t, filepath.Join(w.out, "acme"), vmName)
	require.NoError(t, w.argo.Refresh(ctx, app))
	require.NoError(t, w.argo.WaitFor(ctx, syncTimeout, "the webhook's denial in "+app, func(apps map[string]*argocd.Application) (bool, error) {
		a := apps[app]
		if a == nil || a.Status.OperationState == nil || a.Status.OperationState.SyncResult == nil ||
			a.Status.OperationState.SyncResult.Revision != rev {
			return false, nil
		}
		msgs := a.OperationMessages()
		return strings.Contains(msgs, "denied the request") && strings.Contains(msgs, denial), nil
	}))
	apps, err := w.argo.Applications(ctx)
	require.NoError(t, err)
	assert.NotEqual(t, argocd.Succeeded, apps[app].OperationPhase())
	t.Logf("%s: %s", app, apps[app].Status.OperationState.Message)

	var after kubevirtv1.VirtualMachine
	require.NoError(t, tn.cluster.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: vmName}, &after))
	assert.Equal(t, before.ResourceVersion, after.ResourceVersion, "the denied VM was changed")
	assert.Len(t, after.Spec.Template.Spec.Domain.Devices.GPUs, len(before.Spec.Template.Spec.Domain.Devices.GPUs))

	// generate overwrites the hand edit; the sync's next retry picks up the new commit.
	fixed := w.generate(t, tn)
	require.NotEqual(t, rev, fixed)
	require.NoError(t, w.argo.Refresh(ctx, app))
	w.waitSyncedAt(t, app, fixed)
}

// expectedDenial is the message inferplane's policy gives for one VM of a repository tree.
func expectedDenial(t *testing.T, repo, vmName string) string {
	t.Helper()
	files := map[string][]byte{}
	require.NoError(t, filepath.WalkDir(repo, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			if d != nil && d.Name() == ".git" {
				return filepath.SkipDir
			}
			return err
		}
		rel, _ := filepath.Rel(repo, p)
		files[filepath.ToSlash(rel)], err = os.ReadFile(p)
		return err
	}))
	denied, err := policy.ReviewFiles(context.Background(), nil, files)
	require.NoError(t, err)
	for _, r := range denied {
		if r.Ref.Name == vmName {
			return r.Message()
		}
	}
	t.Fatalf("the policy allows the edited %s", vmName)
	return ""
}

// testRemovedJobIsPruned: removing a job from the inputs and running generate makes Argo CD
// delete its Application (the root app prunes it) and, through the Application's finalizer,
// every object of the job, storage included; the other jobs are untouched.
func testRemovedJobIsPruned(t *testing.T, w *world) {
	ctx := context.Background()
	tn := w.tenants["acme"]
	const job = "transcribe"
	gone := w.renderedObjects(t, "acme", "jobs/"+job)
	kept := liveUIDs(ctx, t, tn, w.renderedObjects(t, "acme", "jobs/qwen3-32b"))

	delete(tn.inputs, "acme/jobs/"+job+".yaml")
	rev := w.generate(t, tn)
	require.NoError(t, w.argo.Refresh(ctx, rootName("acme")))
	require.NoError(t, w.argo.WaitFor(ctx, syncTimeout, "acme-"+job+" deleted", func(apps map[string]*argocd.Application) (bool, error) {
		_, exists := apps["acme-"+job]
		root := apps[rootName("acme")]
		return !exists && root != nil && root.SyncedAndSucceeded() && root.Status.Sync.Revision == rev, nil
	}))
	kinds := map[string]int{}
	for _, o := range gone {
		waitGone(ctx, t, tn, o)
		kinds[o.GetKind()]++
	}
	for _, k := range []string{"VirtualMachine", "Service", "PersistentVolumeClaim", "Secret"} {
		require.Positive(t, kinds[k], "the removed job rendered no %s: nothing was proven", k)
	}
	assert.Equal(t, kept, liveUIDs(ctx, t, tn, w.renderedObjects(t, "acme", "jobs/qwen3-32b")), "another job's objects changed")
}

// testReplicasTwoToOne: a job's replicas 2 -> 1 removes exactly the second replica's objects
// (its VM, cloud-init Secret, model-cache PVC and Service); the first replica's stay the same
// objects.
func testReplicasTwoToOne(t *testing.T, w *world) {
	ctx := context.Background()
	tn := w.tenants["acme"]
	const job, app = "qwen3-32b", "acme-qwen3-32b"
	var r0, r1 []*unstructured.Unstructured
	for _, o := range w.renderedObjects(t, "acme", "jobs/"+job) {
		switch {
		case strings.HasPrefix(o.GetName(), job+"-r1"):
			r1 = append(r1, o)
		case strings.HasPrefix(o.GetName(), job+"-r0"):
			r0 = append(r0, o)
		}
	}
	require.Len(t, r1, 4, "the second replica: VM, Secret, PVC, Service")
	before := liveUIDs(ctx, t, tn, r0)

	f := tn.inputs["acme/jobs/"+job+".yaml"]
	require.NotNil(t, f)
	require.Contains(t, string(f.Data), "replicas: 2")
	f.Data = []byte(strings.Replace(string(f.Data), "replicas: 2", "replicas: 1", 1))
	rev := w.generate(t, tn)
	require.NoError(t, w.argo.Refresh(ctx, app, rootName("acme")))
	w.waitSyncedAt(t, app, rev)
	for _, o := range r1 {
		waitGone(ctx, t, tn, o)
	}
	assert.Equal(t, before, liveUIDs(ctx, t, tn, r0), "the first replica's objects were replaced")
}

// waitSyncedAt waits until app is Synced and Succeeded at revision rev.
func (w *world) waitSyncedAt(t *testing.T, app, rev string) {
	t.Helper()
	require.NoError(t, w.argo.WaitFor(context.Background(), syncTimeout, app+" synced at "+rev, func(apps map[string]*argocd.Application) (bool, error) {
		a := apps[app]
		return a != nil && a.SyncedAndSucceeded() && a.Status.Sync.Revision == rev &&
			a.Status.OperationState.SyncResult != nil && a.Status.OperationState.SyncResult.Revision == rev, nil
	}))
}

// getLive reads the object rendered as want from the tenant's cluster; nil when absent.
func getLive(ctx context.Context, t *testing.T, tn *tenant, want *unstructured.Unstructured) *unstructured.Unstructured {
	t.Helper()
	live := &unstructured.Unstructured{}
	live.SetGroupVersionKind(want.GroupVersionKind())
	err := tn.cluster.Client.Get(ctx, client.ObjectKeyFromObject(want), live)
	if apierrors.IsNotFound(err) {
		return nil
	}
	require.NoError(t, err)
	return live
}

// liveUIDs maps each object to its UID in the cluster (all must exist).
func liveUIDs(ctx context.Context, t *testing.T, tn *tenant, objs []*unstructured.Unstructured) map[string]types.UID {
	t.Helper()
	uids := map[string]types.UID{}
	for _, o := range objs {
		live := getLive(ctx, t, tn, o)
		require.NotNil(t, live, "%s missing", kubeenv.Describe(o))
		uids[kubeenv.Describe(o)] = live.GetUID()
	}
	return uids
}

// waitGone waits until the object is deleted (a foreground deletion ends when the garbage
// collector removes its finalizer), up to 3 minutes: a kube-controller-manager on a loaded
// machine gets to it late.
func waitGone(ctx context.Context, t *testing.T, tn *tenant, o *unstructured.Unstructured) {
	t.Helper()
	var last *unstructured.Unstructured
	err := wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		last = getLive(ctx, t, tn, o)
		return last == nil, nil
	})
	if err != nil {
		t.Fatalf("%s still in the cluster: deletionTimestamp %v, finalizers %v", kubeenv.Describe(o),
			last.GetDeletionTimestamp(), last.GetFinalizers())
	}
}
