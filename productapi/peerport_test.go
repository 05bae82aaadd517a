package productapi_test

import (
	"bytes"
	"encoding/json"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/inferplane/inferplane/e2e/gitserver"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/internal/serve/servetest"
	"github.com/inferplane/inferplane/internal/testnet"
	"github.com/inferplane/inferplane/productapi"
	"github.com/inferplane/inferplane/productapi/apitest"
)

// consoleAnswersAll stands in for the web console at /: it answers every path, so a route the
// customers' port handed to whatever serves / would answer 200 here, not 404.
type consoleAnswersAll struct{}

func (consoleAnswersAll) ServeHTTP(w http.ResponseWriter, _ *http.Request) {
	_, _ = w.Write([]byte("console"))
}
func (consoleAnswersAll) Shutdown() {}

// TestPeerRouteOnItsOwnPort runs api serve's wiring (productapi.Serve) with peers. The
// customers' port answers the peer route 404, as any path it does not serve, with the peers'
// token or without, and with a console at / or none. The peer port refuses a post without the
// token or with another (401), serves nothing but the peer route, and takes a prepared change
// with the token: this replica's writer pushes it, naming itself (its peer URL) the writer.
func TestPeerRouteOnItsOwnPort(t *testing.T) {
	for _, console := range []bool{false, true} {
		t.Run("console "+strconv.FormatBool(console), func(t *testing.T) {
			var cons productapi.Console
			if console {
				cons = consoleAnswersAll{}
			}
			r, addr, peer := servePeers(t, cons, serve.HTTP{})

			head := gitserver.Git(t, r.Path("inputs"), "rev-parse", "main")
			const file = "notes/handed-over.txt"
			change, err := json.Marshal(inputsrepo.Prepared{Base: strings.TrimSpace(head), Author: inputsrepo.Author{Name: "Dana", Email: "dana@acme.example"},
				Message: "a change another replica prepared", Reads: []string{file}, Deps: []string{""},
				Edits: map[string][]byte{file: []byte("handed over\n")}})
			require.NoError(t, err)
			for _, tc := range []struct {
				name, method, url, token string
				want                     int
			}{
				{"customers' port, no token", http.MethodPost, "http://" + addr + "/internal/v1/inputs/submit", "", http.StatusNotFound},
				{"customers' port, the token", http.MethodPost, "http://" + addr + "/internal/v1/inputs/submit", "peers-secret", http.StatusNotFound},
				{"peer port, no token", http.MethodPost, "http://" + peer + "/internal/v1/inputs/submit", "", http.StatusUnauthorized},
				{"peer port, another token", http.MethodPost, "http://" + peer + "/internal/v1/inputs/submit", "not-the-secret", http.StatusUnauthorized},
				{"peer port, the API", http.MethodGet, "http://" + peer + "/api/v1/tenants/acme/jobs", "dana", http.StatusNotFound},
				{"peer port, the probes", http.MethodGet, "http://" + peer + "/readyz", "", http.StatusNotFound},
			} {
				resp, body := peerRequest(t, tc.method, tc.url, tc.token, change)
				assert.Equal(t, tc.want, resp.StatusCode, "%s: %s", tc.name, body)
			}
			assert.Equal(t, strings.TrimSpace(head), strings.TrimSpace(gitserver.Git(t, r.Path("inputs"), "rev-parse", "main")), "nothing refused was pushed")

			resp, body := peerRequest(t, http.MethodPost, "http://"+peer+"/internal/v1/inputs/submit", "peers-secret", change)
			require.Equal(t, http.StatusOK, resp.StatusCode, body)
			var answer struct {
				Result  *struct{ Commit string } `json:"result"`
				Refused string                   `json:"refused"`
				Reason  string                   `json:"reason"`
			}
			require.NoError(t, json.Unmarshal([]byte(body), &answer), body)
			require.NotNil(t, answer.Result, "refused: %s %s", answer.Refused, answer.Reason)
			assert.Equal(t, answer.Result.Commit, strings.TrimSpace(gitserver.Git(t, r.Path("inputs"), "rev-parse", "main")), "pushed")
			assert.Equal(t, "handed over\n", gitserver.Git(t, r.Path("inputs"), "show", "main:"+file))
			writer := gitserver.Git(t, r.Path("inputs"), "log", "-1", "--format=%(trailers:key="+inputsrepo.TrailerWriter+",valueonly)", "main")
			assert.True(t, strings.HasPrefix(writer, "http://"+peer+" "), "the writer named: %q", writer)
		})
	}
}

// servePeers runs productapi.Serve with peers (token "peers-secret", the peer route on a
// 127.0.0.1 port of its own within pb) and cons at / (none: nil) over the bundled inputs in a
// file:// repository; it returns the repositories, the customers' and the peers' addresses.
func servePeers(t *testing.T, cons productapi.Console, pb serve.HTTP) (apitest.Remotes, string, string) {
	t.Helper()
	r := apitest.Remotes{Dir: t.TempDir()}
	inputs := apitest.BundledInputs(t, r)
	tokenFile := filepath.Join(t.TempDir(), "token")
	require.NoError(t, os.WriteFile(tokenFile, []byte("peers-secret\n"), 0o400))
	peer := "127.0.0.1:" + strconv.Itoa(testnet.FreePort(t))
	c := productapi.Config{Listen: "127.0.0.1:0", Inputs: inputsrepo.Options{URL: inputs},
		PeerListen: peer, PeerURL: "http://" + peer, PeerTokenFile: tokenFile, PeerBounds: pb}
	if cons != nil {
		c.Console = func(http.Handler, string) (productapi.Console, error) { return cons, nil }
	}
	return r, serveConfig(t, c), peer
}

// TestPeerPortHoldsAgainstHostileClients attacks the peer port with its bounds set short
// through Config.PeerBounds, the attacks that carry a body holding the peers' token (as a
// replica whose token leaked would): every attack is answered or cut, the port answers
// meanwhile, and nothing is pushed.
func TestPeerPortHoldsAgainstHostileClients(t *testing.T) {
	r, _, peer := servePeers(t, nil, serve.HTTP{ReadHeaderTimeout: time.Second, ReadTimeout: 2 * time.Second,
		WriteTimeout: 2 * time.Second, IdleTimeout: 2 * time.Second, MaxBodyBytes: 1 << 20, Conns: serve.Conns{MaxPerClient: 50}})
	head := func() string { return gitserver.Git(t, r.Path("inputs"), "rev-parse", "main") }
	before := head()
	nothingPushed := func(t *testing.T) { assert.Equal(t, before, head(), "nothing pushed") }
	target := servetest.Target{Addr: peer, Method: http.MethodPost, Path: "/internal/v1/inputs/submit", ContentType: "application/json",
		Header: http.Header{"Authorization": {"Bearer peers-secret"}},
		Normal: servetest.Request(http.MethodPost, "http://"+peer+"/internal/v1/inputs/submit", nil, http.StatusUnauthorized)}
	servetest.Run(t, target, servetest.Options{}, []servetest.Case{
		{Name: "slow header", Attack: servetest.SlowHeader(200 * time.Millisecond), Status: []int{400, 408}, Cut: true},
		{Name: "slow prepared change", Attack: servetest.SlowBody(200 * time.Millisecond), Status: []int{400, 408}, Cut: true, After: nothingPushed},
		{Name: "500 idle connections from another client", Attack: servetest.IdleConns(500), Cut: true, Target: servetest.From("127.0.0.2")},
		{Name: "1 MiB header", Attack: servetest.BigHeader(1 << 20), Status: []int{431}, Cut: true},
		{Name: "10 MB prepared changes, four at once", Attack: servetest.BigBody(10_000_000, 4), Status: []int{400, 413}, Cut: true, After: nothingPushed},
		{Name: "a prepared change nested 100,000 deep", Attack: servetest.DeepJSON("edits", 100_000), Status: []int{400}, After: nothingPushed},
	})
}

// peerRequest sends body with a bearer token (none when empty) and returns the answer and its body.
func peerRequest(t *testing.T, method, url, token string, body []byte) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b bytes.Buffer
	_, err = b.ReadFrom(resp.Body)
	require.NoError(t, err)
	return resp, b.String()
}
