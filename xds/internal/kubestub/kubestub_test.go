package kubestub

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"k8s.io/client-go/rest"
	kubevirtv1 "kubevirt.io/api/core/v1"

	"github.com/inferplane/inferplane/xds/discovery"
	"github.com/inferplane/inferplane/xds/internal/vmitest"
)

// The stub is good enough for discovery.Kube: its list, watch and discovery answers give the
// replicas and their changes, as a real API server's do in xds/discovery's tests.
func TestKubeSourceReadsTheStub(t *testing.T) {
	var vmis []*kubevirtv1.VirtualMachineInstance
	for i := range 3 {
		v := vmitest.VMI(vmitest.Node{Tenant: "acme", Job: "chat", Runtime: "vllm", Replica: i, ServingPort: 8000, RequireAPIKey: true})
		Running(v, "10.0.0."+string(rune('1'+i)))
		vmis = append(vmis, v)
	}
	s, err := Start(vmis)
	require.NoError(t, err)
	defer s.Close()
	src := &discovery.Kube{Config: &rest.Config{Host: s.URL}, Namespaces: []string{"acme"}, Debounce: time.Millisecond}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	updates := make(chan discovery.Update)
	go func() { _ = src.Run(ctx, updates) }()
	next := func(cond func(discovery.Update) bool) {
		t.Helper()
		for {
			select {
			case u := <-updates:
				if cond(u) {
					return
				}
			case <-ctx.Done():
				t.Fatal("no such update")
			}
		}
	}
	ready := func(u discovery.Update) int {
		n := 0
		for _, r := range u.Replicas {
			if r.Ready && r.Candidate() {
				n++
			}
		}
		return n
	}
	next(func(u discovery.Update) bool { return len(u.Replicas) == 3 && ready(u) == 3 })
	require.NoError(t, s.Update("acme", "chat-r1-n0", func(v *kubevirtv1.VirtualMachineInstance) { SetReady(v, false) }))
	next(func(u discovery.Update) bool { return ready(u) == 2 })
}
