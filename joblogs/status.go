package joblogs

import (
	"context"
	"errors"
	"io"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/agent/guestlog"
	"github.com/inferplane/inferplane/lifecycle"
)

// What one status read asks the kubelet for: the last StatusTail console lines, at most
// StatusLimitBytes of them. The agent repeats its status every guestlog.StatusInterval, so
// the tail holds one unless the VM printed more than StatusTail lines in that time; the
// agent's rate limit and a serial console's speed keep a loading or crash-looping server well
// under it.
const (
	StatusTail       = 200
	StatusLimitBytes = 256 << 10
)

// StaleAfter is how old a status may be and still count: three of the agent's intervals. An
// older one says the agent has stopped writing; the VMI's own state is shown instead.
const StaleAfter = 3 * guestlog.StatusInterval

// LatestStatus reads the agent's last status from a short tail of a pod's console log; nil
// when the tail has none.
func LatestStatus(ctx context.Context, c Cluster, namespace, pod string) (*lifecycle.AgentReport, error) {
	tail, limit := int64(StatusTail), int64(StatusLimitBytes)
	rc, err := c.Log(ctx, namespace, pod, &corev1.PodLogOptions{Container: Container, TailLines: &tail, LimitBytes: &limit})
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	lr := newLineReader(rc, MaxConsoleLine)
	var last *lifecycle.AgentReport
	for {
		line, skipped, err := lr.next()
		if err != nil {
			if errors.Is(err, io.EOF) {
				return last, nil
			}
			return last, err
		}
		if skipped > 0 {
			continue
		}
		rec, derr := guestlog.Decode(line)
		if derr == nil && rec.Kind == guestlog.KindStatus {
			last = &lifecycle.AgentReport{Status: *rec.Status, At: rec.Time}
		}
	}
}

// StatusCache keeps each pod's latest status for TTL, and reads a pod once however many ask
// at the same time, so a burst of status requests costs one log read per VM.
type StatusCache struct {
	// TTL is how long a read stands (default 5 s).
	TTL time.Duration
	// Timeout bounds one read (default 3 s): a VM whose log does not answer in time shows its
	// VMI's stage.
	Timeout time.Duration

	mu      sync.Mutex
	entries map[types.UID]*statusEntry
}

type statusEntry struct {
	ready chan struct{}
	rep   *lifecycle.AgentReport
	at    time.Time
}

// maxCached bounds the cache: past it, entries older than TTL are dropped on the next read.
const maxCached = 4096

func (c *StatusCache) ttl() time.Duration {
	if c.TTL > 0 {
		return c.TTL
	}
	return 5 * time.Second
}

// Get is the pod's latest status, read at most once per TTL.
func (c *StatusCache) Get(ctx context.Context, cl Cluster, namespace string, pod *corev1.Pod) *lifecycle.AgentReport {
	now := time.Now()
	c.mu.Lock()
	if c.entries == nil {
		c.entries = map[types.UID]*statusEntry{}
	}
	e := c.entries[pod.UID]
	if e == nil || now.Sub(e.at) > c.ttl() {
		if len(c.entries) >= maxCached {
			for k, old := range c.entries {
				if now.Sub(old.at) > c.ttl() {
					delete(c.entries, k)
				}
			}
		}
		e = &statusEntry{ready: make(chan struct{}), at: now}
		c.entries[pod.UID] = e
		go func() {
			defer close(e.ready)
			timeout := c.Timeout
			if timeout <= 0 {
				timeout = 3 * time.Second
			}
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
			defer cancel()
			e.rep, _ = LatestStatus(rctx, cl, namespace, pod.Name)
		}()
	}
	c.mu.Unlock()
	select {
	case <-e.ready:
		return e.rep
	case <-ctx.Done():
		return nil
	}
}

// AgentReports reads the latest agent status of the VMs named (lifecycle.AgentWanted), from
// the virt-launcher pods of their current instances (the pod KubeVirt made for the VMI: its
// kubevirt.io/created-by is the VMI's UID). A VM whose pod or status cannot be read, or whose
// status is older than StaleAfter, is left out: its VMI's state stands. cache nil reads every
// time.
func AgentReports(ctx context.Context, c Cluster, cache *StatusCache, namespace, tenant, job string,
	vmis []kubevirtv1.VirtualMachineInstance, vms []string, now time.Time) map[string]*lifecycle.AgentReport {
	if len(vms) == 0 {
		return nil
	}
	pods, err := c.Pods(ctx, namespace, Selector(tenant, job, nil, nil))
	if err != nil {
		return nil
	}
	uid := map[string]types.UID{}
	for i := range vmis {
		uid[vmis[i].Name] = vmis[i].UID
	}
	if cache == nil {
		cache = &StatusCache{TTL: time.Nanosecond}
	}
	out := map[string]*lifecycle.AgentReport{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, name := range vms {
		pod := podOf(pods, name, uid[name])
		if pod == nil {
			continue
		}
		wg.Go(func() {
			rep := cache.Get(ctx, c, namespace, pod)
			if rep == nil || now.Sub(rep.At) > StaleAfter {
				return
			}
			mu.Lock()
			out[name] = rep
			mu.Unlock()
		})
	}
	wg.Wait()
	return out
}

// podOf is the running pod of a VM's instance: the one KubeVirt made for that VMI, else the
// VM's newest running pod.
func podOf(pods []corev1.Pod, vm string, vmi types.UID) *corev1.Pod {
	var best *corev1.Pod
	for i := range pods {
		p := &pods[i]
		s, ok := sourceOf(p)
		if !ok || s.VM != vm || ended(p) {
			continue
		}
		if vmi != "" && s.VMI == vmi {
			return p
		}
		if best == nil || p.CreationTimestamp.After(best.CreationTimestamp.Time) {
			best = p
		}
	}
	return best
}
