package clusterdouble

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/generator"
	"github.com/inferplane/inferplane/lifecycle"
	"github.com/inferplane/inferplane/lifecycle/cluster"
)

var servers kubeenv.Servers

func TestMain(m *testing.M) { os.Exit(servers.Main(m)) }

// The double follows a tenant's repository into a real API server: a commit's jobs become an
// Application that reaches Synced and VMs whose instances reach Ready at the address of a
// replica double that answers; a deleted instance comes back; a commit without a job prunes it.
// What jobs detail computes from all that is serving.
func TestFollowsTheRepository(t *testing.T) {
	env := servers.Get(t, "cluster")
	dir := t.TempDir()
	opts := generator.Options{RecipesDir: "../../recipes", TenantsDir: filepath.Join(dir, "tenants"), OutDir: filepath.Join(dir, "out"), Tenant: "acme"}
	require.NoError(t, os.CopyFS(opts.TenantsDir, os.DirFS("../../tenants")))
	ctx := context.Background()
	_, err := generator.Generate(ctx, opts)
	require.NoError(t, err)

	w := New(Options{Host: env.Client, Tenant: func(string) client.Client { return env.Client }, OutDir: opts.OutDir, Step: 50 * time.Millisecond})
	t.Cleanup(w.Close)
	vmi := func(name string) (*kubevirtv1.VirtualMachineInstance, error) {
		var v kubevirtv1.VirtualMachineInstance
		return &v, env.Client.Get(ctx, client.ObjectKey{Namespace: "acme", Name: name}, &v)
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		require.Eventually(t, func() bool {
			require.NoError(t, w.Reconcile(ctx))
			return ok()
		}, time.Minute, 50*time.Millisecond, what)
	}
	until("qwen3-32b's replicas ready", func() bool {
		v, err := vmi("qwen3-32b-r1-n0")
		return err == nil && ready(v)
	})
	v, err := vmi("qwen3-32b-r1-n0")
	require.NoError(t, err)
	port, err := strconv.Atoi(v.Annotations[v1alpha1.AnnotationServingPort])
	require.NoError(t, err)
	resp, err := http.Get("http://" + v.Status.Interfaces[0].IP + ":" + strconv.Itoa(port) + "/health")
	require.NoError(t, err)
	resp.Body.Close()
	assert.Equal(t, http.StatusOK, resp.StatusCode, "the replica's model server answers at the address its VMI reports")

	objs := &cluster.Objects{}
	objs.Apps, err = cluster.ReadApplications(ctx, env.Client, env.Config.Host, cluster.Tenant{Name: "acme", ArgoCDNamespace: "argocd"})
	require.NoError(t, err)
	require.NotNil(t, objs.Apps["qwen3-32b"])
	assert.Equal(t, lifecycle.SyncSynced, objs.Apps["qwen3-32b"].Status.Sync.Status)

	// jobs restart deletes an instance: runStrategy Always makes a new one.
	require.NoError(t, env.Client.Delete(ctx, v))
	until("the deleted instance made again and ready", func() bool {
		n, err := vmi("qwen3-32b-r1-n0")
		return err == nil && n.UID != v.UID && ready(n)
	})

	// A commit without the job prunes it.
	require.NoError(t, os.Remove(filepath.Join(opts.TenantsDir, "acme", "jobs", "qwen3-32b.yaml")))
	_, err = generator.Generate(ctx, opts)
	require.NoError(t, err)
	until("the job pruned", func() bool {
		var vms kubevirtv1.VirtualMachineList
		require.NoError(t, env.Client.List(ctx, &vms, client.MatchingLabels{v1alpha1.LabelJob: "qwen3-32b"}))
		return len(vms.Items) == 0
	})
	_, err = vmi("qwen3-32b-r0-n0")
	assert.Error(t, err, "its instances too")
}
