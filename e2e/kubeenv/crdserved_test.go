package kubeenv_test

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/e2e/kubeenv"
)

const widgetCRD = `apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.race.inferplane.io
spec:
  group: race.inferplane.io
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget, listKind: WidgetList}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec: {type: object, properties: {size: {type: integer}}}
`

// lagging answers 404 to the first requests for a group version's discovery and for its
// resource, as the API server does for a while after a CRD is Established (its discovery and
// handler catch up asynchronously: seconds under load).
type lagging struct {
	prefix    string
	mu        sync.Mutex
	remaining int
}

// wrap puts l in front of one client's transport (every client built from the config gets
// its own; they share the count).
func (l *lagging) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		if !l.hold(req) {
			return next.RoundTrip(req)
		}
		return notFound(req), nil
	})
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

func (l *lagging) hold(req *http.Request) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	hold := req.Method == http.MethodGet && strings.HasPrefix(req.URL.Path, l.prefix) && l.remaining > 0
	if hold {
		l.remaining--
	}
	return hold
}

func notFound(req *http.Request) *http.Response {
	body := `{"kind":"Status","apiVersion":"v1","status":"Failure","message":"the server could not find the requested resource","reason":"NotFound","code":404}`
	return &http.Response{StatusCode: http.StatusNotFound, Status: "404 Not Found", Request: req, ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(strings.NewReader(body))}
}

func (l *lagging) held() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.remaining
}

// TestInstallCRDsWaitsUntilServed is the race `make test` lost under load in webhook/e2e ("no
// matches for kind Tenant"), made deterministic: the client's REST mapping was filled before the
// CRD existed, and the API server's discovery of the new kind lags behind its Established
// condition (held back here by a RoundTripper in front of the real API server: the only part
// that is staged). InstallCRDs must not return before the kind is served, and the client must
// create an object of it at once.
func TestInstallCRDsWaitsUntilServed(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	lag := &lagging{prefix: "/apis/race.inferplane.io/v1", remaining: 5}
	cfg := rest.CopyConfig(env.Config)
	cfg.Wrap(lag.wrap)
	e, err := kubeenv.Connect(cfg)
	require.NoError(t, err)
	// The client maps a kind before the CRD exists: its mapping of the API groups is cached.
	require.NoError(t, e.Client.Get(ctx, client.ObjectKey{Name: "default"}, &corev1.Namespace{}))

	crdFile := filepath.Join(t.TempDir(), "widgets.yaml")
	require.NoError(t, os.WriteFile(crdFile, []byte(widgetCRD), 0o600))
	t.Cleanup(func() {
		crd := &apiextensionsv1.CustomResourceDefinition{}
		crd.Name = "widgets.race.inferplane.io"
		_ = env.Client.Delete(context.Background(), crd)
	})
	require.NoError(t, e.InstallCRDs(ctx, crdFile))
	assert.Zero(t, lag.held(), "InstallCRDs returned while the kind's discovery still answered 404")

	require.NoError(t, e.EnsureNamespace(ctx, "race"))
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "race.inferplane.io/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "race"}, "spec": map[string]any{"size": int64(3)},
	}}
	require.NoError(t, e.Client.Create(ctx, w), "the kind InstallCRDs just installed is created at once")
}
