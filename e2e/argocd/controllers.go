package argocd

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/e2e/proc"
)

// The controllers of kube-controller-manager a test API server needs for Argo CD's deletions to
// finish as they do in a real cluster: Argo CD deletes with foreground propagation, which the
// API server only completes once the garbage collector has removed the foregroundDeletion
// finalizer; and a PVC carries kubernetes.io/pvc-protection until its protection controller sees
// that no pod uses it.
var controllers = []string{"garbage-collector-controller", "persistentvolumeclaim-protection-controller"}

// ControllerManager is a kube-controller-manager running those controllers against one API
// server.
type ControllerManager struct {
	dir  string
	proc *proc.Process
}

// StartControllerManager starts the kube-controller-manager in binDir against the API server
// of cfg (a client certificate, as envtest makes), serving its own endpoints on 127.0.0.1 only.
func StartControllerManager(ctx context.Context, binDir string, cfg *rest.Config, name string) (*ControllerManager, error) {
	dir, err := os.MkdirTemp("", "inferplane-kcm-")
	if err != nil {
		return nil, err
	}
	cm := &ControllerManager{dir: dir}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := writeKubeconfig(kubeconfig, cfg, ""); err != nil {
		return nil, errors.Join(err, cm.Stop())
	}
	ports, err := freePorts(1)
	if err != nil {
		return nil, err
	}
	cm.proc, err = proc.Start("kube-controller-manager-"+name, filepath.Join(binDir, "kube-controller-manager"), []string{
		"--kubeconfig", kubeconfig,
		"--controllers", strings.Join(controllers, ","),
		"--leader-elect=false",
		"--bind-address", "127.0.0.1", "--secure-port", strconv.Itoa(ports[0]),
		"--cert-dir", filepath.Join(dir, "certs"),
	}, []string{"HOME=" + dir}, dir)
	if err != nil {
		return cm, err
	}
	return cm, waitListening(ctx, cm.proc, "127.0.0.1:"+strconv.Itoa(ports[0]))
}

// Stop stops the controller manager and removes its folder. It is nil-safe.
func (cm *ControllerManager) Stop() error {
	if cm == nil {
		return nil
	}
	if cm.proc != nil {
		cm.proc.Stop(5 * time.Second)
		cm.proc = nil
	}
	return os.RemoveAll(cm.dir)
}

// Check returns an error when the controller manager has exited.
func (cm *ControllerManager) Check() error {
	if ok, _ := cm.proc.Exited(); ok {
		return proc.ErrExited(cm.proc)
	}
	return nil
}
