package envoydrain

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// adminStandIn is a STAND-IN for Envoy's admin interface (no Envoy runs here): it records the
// drain request and answers /stats with the active requests the test scripts, in Envoy's JSON
// format. What a real Envoy does with the drain is for docs/xds.md's list of what a real
// Envoy must still prove.
type adminStandIn struct {
	mu      sync.Mutex
	drains  []string
	active  []int // answered in turn; the last one stays
	failing bool
}

func (a *adminStandIn) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.mu.Lock()
	defer a.mu.Unlock()
	switch {
	case r.Method == http.MethodPost && r.URL.Path == "/drain_listeners":
		if a.failing {
			http.Error(w, "admin broken", http.StatusInternalServerError)
			return
		}
		a.drains = append(a.drains, r.URL.RawQuery)
		fmt.Fprintln(w, "OK")
	case r.Method == http.MethodGet && r.URL.Path == "/stats" && r.URL.Query().Get("format") == "json":
		n := a.active[0]
		if len(a.active) > 1 {
			a.active = a.active[1:]
		}
		fmt.Fprintf(w, `{"stats":[{"name":"http.admin.downstream_rq_active","value":1},`+
			`{"name":"http.inferplane.downstream_rq_active","value":%d},{"name":"http.inferplane_https.downstream_rq_active","value":0}]}`, n)
	default:
		http.NotFound(w, r)
	}
}

func TestDrainWaitsForActiveRequests(t *testing.T) {
	a := &adminStandIn{active: []int{3, 2, 1, 0}}
	srv := httptest.NewServer(a)
	defer srv.Close()
	admin := srv.Listener.Addr().String()

	res, err := Drain(context.Background(), Config{Admin: admin, MinWait: 50 * time.Millisecond, MaxWait: 5 * time.Second, Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 0, res.Active, "the admin interface's own request is not counted")
	assert.GreaterOrEqual(t, res.Waited, 50*time.Millisecond, "at least the minimum wait")
	assert.Equal(t, []string{"graceful&skip_exit"}, a.drains)

	// Requests that never end: the wait stops at the maximum.
	a.active = []int{2}
	res, err = Drain(context.Background(), Config{Admin: admin, MinWait: 10 * time.Millisecond, MaxWait: 100 * time.Millisecond, Poll: 10 * time.Millisecond})
	require.NoError(t, err)
	assert.Equal(t, 2, res.Active)
	assert.GreaterOrEqual(t, res.Waited, 100*time.Millisecond)

	a.failing = true
	_, err = Drain(context.Background(), Config{Admin: admin})
	assert.ErrorContains(t, err, "start Envoy's drain at "+admin+": 500 Internal Server Error: admin broken")
}

// An Envoy that has already exited counts as drained.
func TestDrainEnvoyGone(t *testing.T) {
	a := &adminStandIn{active: []int{1}}
	srv := httptest.NewServer(a)
	admin := srv.Listener.Addr().String()
	done := make(chan Result, 1)
	go func() {
		res, _ := Drain(context.Background(), Config{Admin: admin, MinWait: 20 * time.Millisecond, MaxWait: 10 * time.Second, Poll: 10 * time.Millisecond})
		done <- res
	}()
	require.Eventually(t, func() bool {
		a.mu.Lock()
		defer a.mu.Unlock()
		return len(a.drains) == 1
	}, 5*time.Second, time.Millisecond)
	srv.Close()
	select {
	case res := <-done:
		assert.Equal(t, 0, res.Active)
	case <-time.After(8 * time.Second):
		t.Fatal("the drain waited for an Envoy that is gone")
	}
}
