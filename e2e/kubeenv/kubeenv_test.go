package kubeenv_test

import (
	"context"
	"net"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

const goodVM = `
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: harness-vm
  namespace: harness
spec:
  runStrategy: Always
  template:
    spec:
      domain:
        devices: {}
        resources:
          requests:
            memory: 1Gi
`

const goodApp = `
apiVersion: argoproj.io/v1alpha1
kind: Application
metadata:
  name: harness-app
  namespace: argocd
spec:
  project: default
  source:
    repoURL: https://example.invalid/repo.git
    path: jobs/a
  destination:
    name: tenant-a
`

// TestHarnessRejectsAndAccepts proves the harness can fail: the real API server, with strict
// field validation, rejects an unknown field and a missing required field, and takes correct
// objects.
func TestHarnessRejectsAndAccepts(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	cases := []struct {
		name    string
		yaml    string
		wantErr string
	}{
		{"virtual machine accepted", goodVM, ""},
		{"application accepted", goodApp, ""},
		{
			name:    "virtual machine with an unknown field",
			yaml:    strings.Replace(goodVM, "runStrategy: Always", "runStrategy: Always\n  gpuCount: 8", 1),
			wantErr: `unknown field "spec.gpuCount"`,
		},
		{
			name:    "application without destination",
			yaml:    strings.Replace(goodApp, "  destination:\n    name: tenant-a\n", "", 1),
			wantErr: "spec.destination: Required value",
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			errs := env.DryRunYAML(ctx, []byte(tc.yaml))
			if tc.wantErr == "" {
				require.Empty(t, errs)
				return
			}
			require.Len(t, errs, 1)
			require.Contains(t, errs[0].Error(), tc.wantErr)
		})
	}
}

// TestCRDsInstalled checks that every kind the project renders or reads is served.
func TestCRDsInstalled(t *testing.T) {
	kubeenv.Require(t, env)
	for _, gk := range []schema.GroupKind{
		{Group: "kubevirt.io", Kind: "VirtualMachine"},
		{Group: "kubevirt.io", Kind: "VirtualMachineInstance"},
		{Group: "argoproj.io", Kind: "Application"},
		{Group: "argoproj.io", Kind: "AppProject"},
		{Group: "argoproj.io", Kind: "ApplicationSet"},
		{Group: "inferplane.io", Kind: "ManagedInferenceJob"},
		{Group: "inferplane.io", Kind: "ModelMaster"},
		{Group: "inferplane.io", Kind: "NodeType"},
		{Group: "inferplane.io", Kind: "Tenant"},
	} {
		_, err := env.Client.RESTMapper().RESTMapping(gk)
		require.NoError(t, err, gk.String())
	}
}

// TestStopLeavesNothingRunning starts a second API server, stops it, and checks that its
// port no longer answers: the harness leaves no process behind.
func TestStopLeavesNothingRunning(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	second, err := kubeenv.Start(ctx)
	require.NoError(t, err)
	host := second.Config.Host
	require.NoError(t, second.Stop())

	u, err := url.Parse(host)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "kube-apiserver still listening on %s after Stop", u.Host)
}

// An API server stopped and started again keeps its port, its data (etcd stays) and its
// certificates: a client made before the stop works after the restart.
func TestAPIServerRestart(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	e := kubeenv.Another(t)
	require.NoError(t, e.EnsureNamespace(ctx, "kept"))
	require.NoError(t, e.StopAPIServer())
	u, err := url.Parse(e.Config.Host)
	require.NoError(t, err)
	conn, err := net.DialTimeout("tcp", u.Host, time.Second)
	if err == nil {
		conn.Close()
	}
	require.Error(t, err, "kube-apiserver still listening on %s after StopAPIServer", u.Host)

	require.NoError(t, e.StartAPIServer())
	var ns corev1.Namespace
	require.NoError(t, e.Client.Get(ctx, client.ObjectKey{Name: "kept"}, &ns), "the same client, the same data")
}
