package productapi_test

import (
	"context"
	"io"
	"net/http"
	"path/filepath"
	"sort"
	"strings"
	"testing"

	"github.com/danielgtaylor/huma/v2"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// route is one operation of the served OpenAPI document, its path's parameters filled in.
type route struct{ method, path string }

// routes are every operation the API serves, as its OpenAPI document lists them: a route added
// later is tested without a change here.
func routes(t *testing.T, s *productapi.Server) []route {
	t.Helper()
	fill := strings.NewReplacer("{tenant}", "acme", "{job}", "chat", "{id}", "0123456789abcdef")
	var out []route
	for p, item := range s.OpenAPI().Paths {
		for method, op := range map[string]*huma.Operation{http.MethodGet: item.Get, http.MethodPost: item.Post, http.MethodPut: item.Put,
			http.MethodPatch: item.Patch, http.MethodDelete: item.Delete} {
			if op != nil {
				out = append(out, route{method, fill.Replace(p)})
			}
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].path+out[i].method < out[j].path+out[j].method })
	require.NotEmpty(t, out)
	return out
}

func send(t *testing.T, method, url, contentType, body string, hdr map[string]string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(context.Background(), method, url, strings.NewReader(body))
	require.NoError(t, err)
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

// assertNoFraming: the headers every answer of the API carries, whatever it is.
func assertNoFraming(t *testing.T, h http.Header, what string) {
	t.Helper()
	assert.Contains(t, h.Get("Content-Security-Policy"), "frame-ancestors 'none'", what)
	assert.Equal(t, "DENY", h.Get("X-Frame-Options"), what)
	assert.Equal(t, "nosniff", h.Get("X-Content-Type-Options"), what)
	assert.Equal(t, "same-origin", h.Get("Cross-Origin-Resource-Policy"), what)
}

// TestBrowsersCannotWrite: no route of /api/v1 lets a page of another site change anything.
// Each operation of the served document, with a signed-in browser's cookie and no token, is
// refused 401 (the API reads no cookie); with the caller's real token, a body a cross-site form
// or a preflight-free fetch can send (text/plain, a form, multipart, no type) is refused 415
// before it is read; a preflight gets no CORS answer; nothing is committed and no key is made.
// Every answer, errors and the routes outside /api/v1 included, forbids framing.
func TestBrowsersCannotWrite(t *testing.T) {
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	h, err := keys.NewHasher([]byte(strings.Repeat("s", 32)))
	require.NoError(t, err)
	store := keys.NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	rep := startReplica(t, r, inputs, people, productapi.Options{Keys: store, Hasher: h})
	head := func() string { return gitserver.Git(t, r.Path("inputs"), "rev-parse", "main") }
	before := head()
	body := `{"name":"x","model":"Qwen/Qwen3-32B","replicas":1}`

	for _, rt := range routes(t, rep.srv) {
		t.Run(rt.method+" "+rt.path, func(t *testing.T) {
			resp, _ := send(t, rt.method, rep.url+rt.path, "", "", map[string]string{"Authorization": "Bearer dana"})
			assertNoFraming(t, resp.Header, "signed in")
			if rt.method == http.MethodGet {
				return
			}
			resp, got := send(t, rt.method, rep.url+rt.path, "application/json", body,
				map[string]string{"Cookie": "__Host-inferplane-session=a-signed-in-browser; other=1"})
			assert.Equal(t, http.StatusUnauthorized, resp.StatusCode, "a cookie and no token: %s", got)
			assertNoFraming(t, resp.Header, "a cookie")
			for _, ct := range []string{"text/plain", "text/plain;charset=UTF-8", "application/x-www-form-urlencoded",
				"multipart/form-data; boundary=x", ""} {
				resp, got := send(t, rt.method, rep.url+rt.path, ct, body, map[string]string{"Authorization": "Bearer dana"})
				assert.Equal(t, http.StatusUnsupportedMediaType, resp.StatusCode, "Content-Type %q: %s", ct, got)
				assert.Contains(t, got, "the body must be JSON", ct)
				assertNoFraming(t, resp.Header, ct)
			}
			resp, _ = send(t, http.MethodOptions, rep.url+rt.path, "", "", map[string]string{"Origin": "http://127.0.0.2:9",
				"Access-Control-Request-Method": rt.method, "Access-Control-Request-Headers": "authorization,content-type"})
			assert.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"), "a preflight is not answered")
			assert.Empty(t, resp.Header.Get("Access-Control-Allow-Headers"))
		})
	}
	assert.Equal(t, before, head(), "a refused request committed to the inputs")
	list, err := store.List(context.Background())
	require.NoError(t, err)
	assert.Empty(t, list, "a refused request made a key")

	// The same request as JSON is what the API takes: the refusals above are for the type.
	resp, got := send(t, http.MethodPost, rep.url+"/api/v1/tenants/acme/keys", "application/json; charset=utf-8", `{"name":"json"}`,
		map[string]string{"Authorization": "Bearer dana"})
	assert.Equal(t, http.StatusCreated, resp.StatusCode, got)

	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/api/v1/openapi.json", "/api/v1/nope"} {
		resp, _ := send(t, http.MethodGet, rep.url+p, "", "", nil)
		assertNoFraming(t, resp.Header, p)
	}
}
