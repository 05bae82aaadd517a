package apitest

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/metering"
)

// idleRegistry is a cluster registry never run: the meter answers from its records.
type idleRegistry struct{}

func (idleRegistry) Run(ctx context.Context, _ chan<- clusters.Snapshot) error {
	<-ctx.Done()
	return nil
}

// Meter serves a real meter (its admin handler, not run: no cluster is watched) over a store
// that holds events, with its clock at now; it returns the meter's URL (api serve --meter).
func Meter(t *testing.T, now time.Time, events ...metering.Event) string {
	t.Helper()
	dir := t.TempDir()
	store, cp, err := metering.OpenStore(dir, now.Add(-40*24*time.Hour))
	require.NoError(t, err)
	require.NoError(t, store.Append(events, cp, now))
	store.Close()
	svc, err := metering.New(metering.Config{Dir: dir, Registry: idleRegistry{}, Now: func() time.Time { return now }})
	require.NoError(t, err)
	srv := httptest.NewServer(svc.Handler())
	t.Cleanup(srv.Close)
	return srv.URL
}

// AcmeMeterRecords are records of acme's two jobs and one key over the two days before now's
// day (GPU: qwen3-32b 3000+3600 s on day 1, mistral-small 2 GPUs x 1800 s on day 2; tokens:
// key 0123456789abcdef, 10 requests 1000/200 on day 1, 5 requests 500/100 on day 2), and one
// of globex.
func AcmeMeterRecords(now time.Time) []metering.Event {
	day := now.Truncate(24 * time.Hour).Add(-24 * time.Hour)
	qwen := metering.Labels{Tenant: "acme", Tier: "h100-dedicated", Job: "qwen3-32b", Model: "Qwen/Qwen3-32B", NodeType: "metal3.gpu-h100", Replica: "0", VM: "qwen3-32b-r0-n0"}
	mistral := metering.Labels{Tenant: "acme", Tier: "h100-dedicated", Job: "mistral-small", Model: "mistralai/Mistral-Small", NodeType: "metal3.gpu-h100", Replica: "0", VM: "mistral-small-r0-n0"}
	globex := metering.Labels{Tenant: "globex", Tier: "h200-dedicated", Job: "llama", NodeType: "metal3.gpu-h200", VM: "llama-r0-n0"}
	key := metering.Labels{Tenant: "acme", Job: "qwen3-32b", Key: "0123456789abcdef"}
	return []metering.Event{
		metering.GPUEvent("test", "u1", qwen, 1, day.Add(10*time.Minute), day.Add(time.Hour)),
		metering.GPUEvent("test", "u1", qwen, 1, day.Add(time.Hour), day.Add(2*time.Hour)),
		metering.GPUEvent("test", "u2", mistral, 2, day.Add(24*time.Hour), day.Add(24*time.Hour+30*time.Minute)),
		metering.GPUEvent("test", "u3", globex, 8, day.Add(time.Hour), day.Add(2*time.Hour)),
		metering.TokenEvent("test", key, day, 10, 1000, 200),
		metering.TokenEvent("test", key, day.Add(25*time.Hour), 5, 500, 100),
	}
}
