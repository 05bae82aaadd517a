// Package joblogs reads what a job's model servers print and what the inference agent in
// each VM says about them, from where the agent writes it: one record per line on the guest's
// serial console (agent/guestlog), which KubeVirt's guest-console-log container of the VM's
// virt-launcher pod turns into that container's log (logSerialConsole), read back through the
// tenant cluster's API server (pods/log), as `kubectl logs` reads it.
//
// Reader.Stream follows or reads a job's VMs at once (one goroutine per virt-launcher pod,
// their lines merged by time and tagged with replica, node and VM); it reads a pod's log only
// as fast as its caller takes the lines, so a slow client slows the reads, never fills memory.
// A follow whose stream drops resumes at the last line's second (pods/log's sinceTime has no
// finer precision) and skips what it has shown by the agent's record numbers. LatestStatus
// reads the agent's last status of one VM from a short tail of its log.
package joblogs

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Container is KubeVirt's container of a virt-launcher pod that prints the guest's serial
// console (with the VMI's spec.domain.devices.logSerialConsole on).
const Container = "guest-console-log"

// LauncherValue is KubeVirt's kubevirt.io label on a virt-launcher pod.
const LauncherValue = "virt-launcher"

// Cluster is one tenant cluster's virt-launcher pods and their logs.
type Cluster interface {
	// Pods are the pods in namespace that selector matches.
	Pods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error)
	// Log opens a container's log (pods/log); it ends with ctx.
	Log(ctx context.Context, namespace, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error)
}

// Kube is a Cluster read through its API server.
type Kube struct{ Client kubernetes.Interface }

// NewKube reaches the cluster of cfg. Its requests have no client timeout (a follow lasts as
// long as its context): every call is bounded by its caller's context.
func NewKube(cfg *rest.Config) (Kube, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.Timeout = 0
	cfg.UserAgent = "inferplane-logs"
	// HTTP/1.1, a connection per stream: a reader that stops reading stops the kubelet's
	// writes through TCP's own window. Over HTTP/2 each stream may hold 4 MiB in the client's
	// flow-control window, which 100 slow follows would turn into 400 MiB of this process.
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return Kube{}, err
	}
	return Kube{Client: c}, nil
}

// Pods implements Cluster.
func (k Kube) Pods(ctx context.Context, namespace string, selector labels.Selector) ([]corev1.Pod, error) {
	l, err := k.Client.CoreV1().Pods(namespace).List(ctx, metav1.ListOptions{LabelSelector: selector.String()})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// Log implements Cluster.
func (k Kube) Log(ctx context.Context, namespace, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
	return k.Client.CoreV1().Pods(namespace).GetLogs(pod, o).Stream(ctx)
}

// Selector selects a job's virt-launcher pods (of one replica, of one node rank, when set):
// KubeVirt labels each kubevirt.io=virt-launcher and copies the VMI's labels to it, which
// are the VM template's (docs/design.md, workload contract).
func Selector(tenant, job string, replica, node *int32) labels.Selector {
	set := labels.Set{kubevirtv1.AppLabel: LauncherValue, v1alpha1.LabelTenant: tenant, v1alpha1.LabelJob: job}
	if replica != nil {
		set[v1alpha1.LabelReplica] = strconv.Itoa(int(*replica))
	}
	if node != nil {
		set[v1alpha1.LabelNodeRank] = strconv.Itoa(int(*node))
	}
	return labels.SelectorFromSet(set)
}

// Source is one VM instance whose console is read: its virt-launcher pod and where it is in
// the job.
type Source struct {
	Pod     string
	UID     types.UID
	Replica int32
	Node    int32
	// VM is the VirtualMachine's name (<job>-r<replica>-n<rank>).
	VM string
	// VMI is the UID of the VM instance the pod runs (KubeVirt's kubevirt.io/created-by).
	VMI     types.UID
	Created time.Time
}

// sourceOf reads a pod's place in the job from its labels; ok is false for a pod without
// them (not a VM of the job's).
func sourceOf(p *corev1.Pod) (Source, bool) {
	l := p.Labels
	r, rerr := strconv.ParseInt(l[v1alpha1.LabelReplica], 10, 32)
	n, nerr := strconv.ParseInt(l[v1alpha1.LabelNodeRank], 10, 32)
	if rerr != nil || nerr != nil || l[v1alpha1.LabelJob] == "" {
		return Source{}, false
	}
	return Source{Pod: p.Name, UID: p.UID, Replica: int32(r), Node: int32(n), VM: policy.VMName(l[v1alpha1.LabelJob], int32(r), int32(n)),
		VMI: types.UID(l[kubevirtv1.CreatedByLabel]), Created: p.CreationTimestamp.Time}, true
}

// sources are the pods' sources, by replica, node and age; pods that ended are left out.
func sources(pods []corev1.Pod) []Source {
	var out []Source
	for i := range pods {
		if ended(&pods[i]) {
			continue
		}
		if s, ok := sourceOf(&pods[i]); ok {
			out = append(out, s)
		}
	}
	slices.SortFunc(out, func(a, b Source) int {
		switch {
		case a.Replica != b.Replica:
			return int(a.Replica - b.Replica)
		case a.Node != b.Node:
			return int(a.Node - b.Node)
		}
		return a.Created.Compare(b.Created)
	})
	return out
}

func ended(p *corev1.Pod) bool {
	return p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed || p.DeletionTimestamp != nil
}

// Kind is what an Entry is.
type Kind string

const (
	// KindLine is a line the model server (or the agent) printed.
	KindLine Kind = "line"
	// KindStatus is the agent's status, shown when a VM's stage changes.
	KindStatus Kind = "status"
	// KindNotice is the reader's own word: a VM instance started again, a stream resumed,
	// lines that could not be read.
	KindNotice Kind = "notice"
)

// Entry is one thing shown: a line, a VM's new status, or a notice.
type Entry struct {
	Kind Kind
	Time time.Time
	// Replica, Node and VM say whose it is (VM empty: the job's).
	Replica, Node int32
	VM            string
	Pod           string
	// Stream, Line and Truncated are a line's (KindLine).
	Stream    guestlog.Stream
	Line      string
	Truncated bool
	// Status is a KindStatus entry's; Text says it (KindStatus) or the notice (KindNotice).
	Status *guestlog.Status
	Text   string
}

func (s Source) notice(at time.Time, format string, args ...any) Entry {
	return Entry{Kind: KindNotice, Time: at, Replica: s.Replica, Node: s.Node, VM: s.VM, Pod: s.Pod, Text: fmt.Sprintf(format, args...)}
}
