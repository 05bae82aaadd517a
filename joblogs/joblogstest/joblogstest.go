// Package joblogstest is a TEST DOUBLE of a tenant cluster's virt-launcher pods and their
// pods/log (joblogs.Cluster), in process: each pod's guest-console-log is a CRI log of
// e2e/kubeletstandin served with the kubelet's options (follow, sinceTime cut to the second as
// it travels through an API server, tailLines, timestamps, limitBytes). The end-to-end test
// (cmd/inferplane) runs the same path through a real kube-apiserver over TLS instead.
package joblogstest

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/e2e/kubeletstandin"
)

// container is KubeVirt's container of the serial console (joblogs.Container).
const container = "guest-console-log"

// Cluster is the double: pods of one tenant's jobs and their console logs.
type Cluster struct {
	t   testing.TB
	dir string

	mu     sync.Mutex
	pods   []corev1.Pod
	logs   map[string]*kubeletstandin.ContainerLog
	open   map[*io.PipeWriter]bool
	asked  []corev1.PodLogOptions
	served int64 // bytes written to readers
	// ListErr, when set, is the answer to every list.
	ListErr error
}

// New is an empty cluster.
func New(t testing.TB) *Cluster {
	return &Cluster{t: t, dir: t.TempDir(), logs: map[string]*kubeletstandin.ContainerLog{}, open: map[*io.PipeWriter]bool{}}
}

// Pod adds a running virt-launcher pod of the tenant's job's VM at replica r, node n (in the
// tenant's namespace, labelled as KubeVirt labels it), and returns its console.
func (s *Cluster) Pod(tenant, job, name string, r, n int32) *Console {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant, UID: types.UID("uid-" + name),
		CreationTimestamp: metav1.Now(), Labels: map[string]string{
			kubevirtv1.AppLabel: "virt-launcher", kubevirtv1.CreatedByLabel: "vmi-" + name,
			v1alpha1.LabelTenant: tenant, v1alpha1.LabelJob: job,
			v1alpha1.LabelReplica: strconv.Itoa(int(r)), v1alpha1.LabelNodeRank: strconv.Itoa(int(n))}},
		Status: corev1.PodStatus{Phase: corev1.PodRunning}}
	s.pods = append(s.pods, p)
	l, err := kubeletstandin.NewContainerLog(filepath.Join(s.dir, name+".log"))
	require.NoError(s.t, err)
	s.logs[name] = l
	s.t.Cleanup(func() { _ = l.Close() })
	return &Console{t: s.t, L: l}
}

// End makes a pod Succeeded, as when its VMI stops.
func (s *Cluster) End(name string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i := range s.pods {
		if s.pods[i].Name == name {
			s.pods[i].Status.Phase = corev1.PodSucceeded
		}
	}
	_ = s.logs[name].Close()
}

// Pods implements joblogs.Cluster.
func (s *Cluster) Pods(_ context.Context, namespace string, sel labels.Selector) ([]corev1.Pod, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ListErr != nil {
		return nil, s.ListErr
	}
	var out []corev1.Pod
	for _, p := range s.pods {
		if p.Namespace == namespace && sel.Matches(labels.Set(p.Labels)) {
			out = append(out, p)
		}
	}
	return out, nil
}

// Log implements joblogs.Cluster: it serves the pod's CRI log as the kubelet would, with sinceTime cut to the second as it
// travels through the API server (metav1.Time is RFC 3339 without fractions).
func (s *Cluster) Log(ctx context.Context, _ string, pod string, o *corev1.PodLogOptions) (io.ReadCloser, error) {
	s.mu.Lock()
	l := s.logs[pod]
	s.asked = append(s.asked, *o.DeepCopy())
	s.mu.Unlock()
	if l == nil || o.Container != container {
		return nil, errors.New("pods \"" + pod + "\" not found")
	}
	ko := kubeletstandin.Options{Follow: o.Follow, Timestamps: o.Timestamps, TailLines: -1}
	if o.TailLines != nil {
		ko.TailLines = *o.TailLines
	}
	if o.LimitBytes != nil {
		ko.LimitBytes = *o.LimitBytes
	}
	if o.SinceTime != nil {
		ko.SinceTime = o.SinceTime.Time.Truncate(time.Second)
	}
	pr, pw := io.Pipe()
	s.mu.Lock()
	s.open[pw] = true
	s.mu.Unlock()
	sctx, cancel := context.WithCancel(ctx)
	go func() {
		err := l.Serve(sctx, countingWriter{pw, s}, ko, nil)
		s.mu.Lock()
		delete(s.open, pw)
		s.mu.Unlock()
		_ = pw.CloseWithError(err)
	}()
	return readCloser{pr, cancel}, nil
}

// Drop cuts every open stream, as an API server restart or a dropped connection would.
func (s *Cluster) Drop() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for pw := range s.open {
		_ = pw.CloseWithError(errors.New("unexpected EOF"))
	}
}

// OpenStreams is how many log streams are open now.
func (s *Cluster) OpenStreams() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.open)
}

// BytesServed is how much of the logs was read so far.
func (s *Cluster) BytesServed() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.served
}

// Options are the log options asked for so far, oldest first.
func (s *Cluster) Options() []corev1.PodLogOptions {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]corev1.PodLogOptions(nil), s.asked...)
}

type countingWriter struct {
	w io.Writer
	s *Cluster
}

func (c countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.s.mu.Lock()
	c.s.served += int64(n)
	c.s.mu.Unlock()
	return n, err
}

type readCloser struct {
	*io.PipeReader
	cancel func()
}

func (r readCloser) Close() error {
	r.cancel()
	return r.PipeReader.Close()
}

// Console writes what a VM's serial console carries, as its guest-console-log container
// prints it: the agent's records (guestlog.Encode) among the kernel's and cloud-init's lines.
type Console struct {
	t testing.TB
	L *kubeletstandin.ContainerLog
	// Seq is the last record's number: the next record without one gets Seq+1.
	Seq uint64
}

// Kernel writes a line that is no record.
func (c *Console) Kernel(line string) { require.NoError(c.t, c.L.Append(line)) }

// Record writes an agent record (numbered and timed now when it is not).
func (c *Console) Record(r guestlog.Record) {
	c.Seq++
	if r.Seq == 0 {
		r.Seq = c.Seq
	}
	if r.Time.IsZero() {
		r.Time = time.Now()
	}
	b, err := guestlog.Encode(r)
	require.NoError(c.t, err)
	require.NoError(c.t, c.L.Append(string(b)))
}

// Line writes a line the model server printed on stderr at a time.
func (c *Console) Line(at time.Time, s string) {
	c.Record(guestlog.Record{Time: at, Kind: guestlog.KindLine, Stream: guestlog.Stderr, Line: s})
}

// Status writes the agent's status at a time.
func (c *Console) Status(at time.Time, s guestlog.Status) {
	c.Record(guestlog.Record{Time: at, Kind: guestlog.KindStatus, Status: &s})
}
