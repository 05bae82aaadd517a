package xds

import (
	"context"
	"io"
	"net"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/e2e/kubeenv"
	"github.com/inferplane/inferplane/e2e/replicadouble"
	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/adstest"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

// cutProxy forwards TCP to the API server until Cut, which closes every connection and from
// then on closes each new one at once: for the xDS server, the API server is gone. Refused
// counts the connections it closed so (the xDS server noticed and tried again); Restore
// forwards again.
type cutProxy struct {
	target string
	addr   string
	lis    net.Listener

	mu      sync.Mutex
	cut     bool
	refused int
	conns   []net.Conn
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{target: target, addr: l.Addr().String(), lis: l}
	t.Cleanup(func() { l.Close(); p.Cut() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go p.forward(c)
		}
	}()
	return p
}

func (p *cutProxy) forward(c net.Conn) {
	p.mu.Lock()
	if p.cut {
		p.refused++
		p.mu.Unlock()
		c.Close()
		return
	}
	p.mu.Unlock()
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	p.conns = append(p.conns, c, up)
	p.mu.Unlock()
	go func() { _, _ = io.Copy(up, c); up.Close() }()
	go func() { _, _ = io.Copy(c, up); c.Close() }()
}

func (p *cutProxy) Cut() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// Refused is how many connections were refused since the cut.
func (p *cutProxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

func (p *cutProxy) Restore() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut, p.refused = false, 0
}

// TestKubernetesSourceEndToEnd creates VMIs the way KubeVirt creates them from the generator's
// VMs, plays virt-controller by setting them Running with loopback IPs where replica doubles
// listen, and watches the endpoints Envoy would get appear, leave on failure, return on
// recovery, and survive the loss of the API server.
func TestKubernetesSourceEndToEnd(t *testing.T) {
	kubeenv.Require(t, env)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	c := env.Client
	require.NoError(t, env.EnsureNamespace(ctx, "acme"))

	// Replica r1 spans two nodes (its worker must be ignored); every head is on its own
	// loopback address, with its port in the serving-port annotation.
	doubles := startDoubles(t, "127.0.0.1", "127.0.0.2", "127.0.0.3")
	var heads []*kubevirtv1.VirtualMachineInstance
	for i, d := range doubles {
		nodes := 1
		if i == 1 {
			nodes = 2
		}
		n := vmitest.Node{Tenant: "acme", Job: "chat", Runtime: "vllm", Replica: i, Nodes: nodes, ServingPort: d.Port(), RequireAPIKey: true}
		head := vmitest.VMI(n)
		require.NoError(t, c.Create(ctx, head))
		heads = append(heads, head)
		if nodes == 2 {
			n.Rank = 1
			worker := vmitest.VMI(n)
			require.NoError(t, c.Create(ctx, worker))
			require.NoError(t, vmitest.SetStatus(ctx, c, worker, kubevirtv1.Running, "127.0.0.9", true))
		}
	}

	// The xDS server reaches the API server through a proxy the test can cut.
	u, err := url.Parse(env.Config.Host)
	require.NoError(t, err)
	proxy := newCutProxy(t, u.Host)
	cfg := rest.CopyConfig(env.Config)
	cfg.Host = "https://" + proxy.addr
	p := serve(t, Config{Source: &discovery.Kube{Config: cfg, Debounce: 10 * time.Millisecond}})

	agent := &adstest.Agent{NodeID: "envoy-kube"}
	require.NoError(t, adstest.Start(ctx, p.conn, agent))
	wait := func(msg string, want ...*replicadouble.Double) {
		t.Helper()
		require.NoError(t, agent.WaitFor(ctx, endpointsAre("acme/chat", addrs(want...))), msg)
	}

	// Scheduled VMIs: the endpoint exists, with no replica yet (Envoy answers 503, not 404).
	wait("no replica before the VMIs run")
	for i, head := range heads {
		require.NoError(t, vmitest.SetStatus(ctx, c, head, kubevirtv1.Running, doubles[i].Host(), true))
	}
	wait("every running, ready, healthy replica", doubles...)

	doubles[0].SetHealthy(false)
	wait("a failing replica leaves", doubles[1], doubles[2])
	doubles[0].SetHealthy(true)
	wait("and returns when it recovers", doubles...)

	require.NoError(t, vmitest.SetStatus(ctx, c, heads[2], kubevirtv1.Running, doubles[2].Host(), false))
	wait("a VMI that is not Ready leaves at once", doubles[0], doubles[1])
	require.NoError(t, vmitest.SetStatus(ctx, c, heads[2], kubevirtv1.Running, doubles[2].Host(), true))
	wait("and returns when Ready", doubles...)

	// The API server goes away: the last known replicas stay, and their probes still decide.
	proxy.Cut()
	// Until the source has tried the API server again and failed, the check below would prove
	// nothing.
	require.Eventually(t, func() bool { return proxy.Refused() > 0 }, 60*time.Second, 10*time.Millisecond,
		"the source never tried to reach the API server again")
	assert.True(t, endpointsAre("acme/chat", addrs(doubles...))(agent.Snapshot()), "losing the API server must not empty the endpoint")
	doubles[1].SetHealthy(false)
	wait("probes still work without the API server", doubles[0], doubles[2])
	doubles[1].SetHealthy(true)
	wait("and bring replicas back", doubles...)

	// It comes back: changes made meanwhile arrive.
	require.NoError(t, c.Delete(ctx, heads[0]))
	proxy.Restore()
	wait("the source resumes after the API server returns", doubles[1], doubles[2])
}
