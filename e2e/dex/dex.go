// Package dex runs the real Dex OIDC provider for tests: the binary hack/gitopsbin.sh builds
// from Dex's own module (hack/gitopstools/dex), on 127.0.0.1 at a free port, with memory
// storage, static clients and static users (bcrypt hashes, and groups: Dex at this pin gives a
// static password user the groups its entry lists), plus Dex's authproxy connector, which takes
// the user and groups from request headers as an authenticating proxy in front of Dex would, so
// the auth-code flow runs without a browser for any user and groups a test makes up.
//
// Tokens are obtained as a client would: the password grant, or the authorization-code flow
// with PKCE (through the local password form or the authproxy connector).
//
// A test asks for Dex with Start: when the binary is missing it skips, saying how to build it,
// unless INFERPLANE_REQUIRE_DEX=1 (set by `make test`), in which case it fails. Dex runs as a
// marked child process (e2e/proc): it dies with the test binary and is stopped on cleanup.
package dex

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"golang.org/x/crypto/bcrypt"

	"github.com/inferplane/inferplane/e2e/proc"
	"github.com/inferplane/inferplane/e2e/toolbin"
)

// Tool is the name hack/gitopsbin.sh builds Dex under.
const Tool = "dex"

// EnvRequire, when "1", turns a missing Dex binary into a test failure instead of a skip.
const EnvRequire = "INFERPLANE_REQUIRE_DEX"

// ProxyConnector is the id of the authproxy connector every Dex of the harness has; Local is
// Dex's own password database.
const (
	ProxyConnector = "proxy"
	LocalConnector = "local"
)

// Client is an OAuth2 client registered with Dex.
type Client struct {
	ID, Secret string
	// Public clients (a CLI) have no secret and must use PKCE.
	Public bool
	// RedirectURIs are where Dex may send the browser back to; the harness's auth-code flow
	// stops at the redirect without connecting to it.
	RedirectURIs []string
}

// User is a static user of Dex's password database.
type User struct {
	Email, Password, Name string
	Groups                []string
	// EmailUnverified makes Dex say email_verified: false for the user.
	EmailUnverified bool
}

// Options say what a Dex is set up with.
type Options struct {
	// Clients default to one confidential client "inferplane" with a random secret.
	Clients []Client
	Users   []User
	// IDTokenTTL is how long tokens are valid (Dex's default, 24 h, when zero).
	IDTokenTTL time.Duration
	// KeyRotation is how often Dex rotates its signing key (its default, 6 h, when zero). Dex
	// looks every 30 s, so a rotation comes within 30 s of the period; the previous key keeps
	// verifying the tokens it signed.
	KeyRotation time.Duration
	// RootIssuer serves Dex at the root of its address (http://127.0.0.1:<port>) instead of
	// under /dex. Dex at our pin needs it for the device flow of a public client without
	// registered redirect URIs: under a path, its verification step sends the browser on with
	// redirect_uri /dex/device/callback, which its own check (only /device/callback) refuses.
	RootIssuer bool
	// Sessions turns on Dex's (experimental) auth sessions. A refresh_token grant needs them at
	// this pin: without them Dex reads the user's offline session inside the storage
	// transaction that rotates the refresh token, and with memory storage that transaction
	// holds the lock the read waits for, so /token hangs for good (dexidp/dex#5017). With
	// them the refresh uses the claims Dex kept at sign-in.
	Sessions bool
}

// Dex is a running Dex.
type Dex struct {
	// Issuer is the issuer URL its tokens carry (http://127.0.0.1:<port>/dex).
	Issuer  string
	Clients []Client

	bin, dir, config string
	env              []string
	proc             *proc.Process
}

// Bin returns the Dex binary, or skips the test (fails it under INFERPLANE_REQUIRE_DEX=1).
func Bin(t testing.TB) string {
	t.Helper()
	dir, err := toolbin.Dir(Tool)
	if err != nil {
		if os.Getenv(EnvRequire) == "1" {
			t.Fatalf("%s=1 but Dex is missing: %v", EnvRequire, err)
		}
		t.Skipf("SKIPPED: %v", err)
	}
	return filepath.Join(dir, Tool)
}

// Start starts a Dex for the test and stops it when the test ends.
func Start(t testing.TB, o Options) *Dex {
	t.Helper()
	bin := Bin(t)
	proc.ReapOrphans()
	d, err := StartIn(bin, t.TempDir(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(d.Stop)
	return d
}

// StartIn starts the Dex binary bin with its configuration and log in dir, outside a test
// (make demo); the caller stops it.
func StartIn(bin, dir string, o Options) (*Dex, error) {
	if len(o.Clients) == 0 {
		o.Clients = []Client{{ID: "inferplane", Secret: randomSecret()}}
	}
	d := &Dex{Clients: o.Clients, bin: bin, dir: dir, config: filepath.Join(dir, "config.yaml"), env: []string{"PATH=" + os.Getenv("PATH")}}
	if o.Sessions {
		d.env = append(d.env, "DEX_SESSIONS_ENABLED=true")
	}
	// A port picked by the kernel, then handed to Dex: another process could take it in
	// between, so a Dex that cannot listen is started again on a new one.
	var lastErr error
	for range 3 {
		port, err := freePort()
		if err != nil {
			return nil, err
		}
		d.Issuer = "http://127.0.0.1:" + strconv.Itoa(port)
		if !o.RootIssuer {
			d.Issuer += "/dex"
		}
		cfg, err := configFor(d.Issuer, port, o)
		if err != nil {
			return nil, err
		}
		if err := os.WriteFile(d.config, cfg, 0o600); err != nil {
			return nil, err
		}
		if lastErr = d.run(); lastErr == nil {
			return d, nil
		}
	}
	return nil, lastErr
}

// run starts the process on the written config and waits for its discovery document.
func (d *Dex) run() error {
	p, err := proc.Start("dex", d.bin, []string{"serve", d.config}, d.env, d.dir)
	if err != nil {
		return err
	}
	d.proc = p
	// Dex starts in about a second; on a machine running two `make test` side by side (load
	// 15 to 25) it can take tens of seconds. The bound is for a Dex that never comes up.
	const bound = 2 * time.Minute
	deadline := time.Now().Add(bound)
	client := &http.Client{Timeout: 5 * time.Second}
	for time.Now().Before(deadline) {
		if ok, _ := p.Exited(); ok {
			return proc.ErrExited(p)
		}
		resp, err := client.Get(d.Issuer + "/.well-known/openid-configuration")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	p.Stop(5 * time.Second)
	return fmt.Errorf("dex did not serve %s within %s; last log lines:\n%s", d.Issuer, bound, p.Tail(30))
}

// Restart stops Dex and starts it again at the same address and configuration. Its storage is
// memory, so it comes back with new signing keys: tokens it signed before no longer verify.
func (d *Dex) Restart(t testing.TB) {
	t.Helper()
	d.Stop()
	if err := d.run(); err != nil {
		t.Fatal(err)
	}
}

// Stop stops Dex; later calls do nothing.
func (d *Dex) Stop() {
	if d.proc == nil {
		return
	}
	if ok, _ := d.proc.Exited(); !ok {
		d.proc.Stop(5 * time.Second)
	}
}

// Log is the tail of Dex's log, for failure messages.
func (d *Dex) Log(lines int) string { return d.proc.Tail(lines) }

// Client returns the registered client with the id (the first one when id is "").
func (d *Dex) Client(id string) Client {
	for _, c := range d.Clients {
		if id == "" || c.ID == id {
			return c
		}
	}
	panic("dex harness: no client " + id)
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

func randomSecret() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// The configuration, as JSON (which Dex reads as YAML).
type (
	config struct {
		Issuer           string           `json:"issuer"`
		Storage          typed            `json:"storage"`
		Web              map[string]any   `json:"web"`
		OAuth2           map[string]any   `json:"oauth2"`
		Expiry           map[string]any   `json:"expiry,omitempty"`
		Sessions         map[string]any   `json:"sessions,omitempty"`
		Logger           map[string]any   `json:"logger"`
		StaticClients    []map[string]any `json:"staticClients"`
		EnablePasswordDB bool             `json:"enablePasswordDB"`
		StaticPasswords  []map[string]any `json:"staticPasswords"`
		Connectors       []connector      `json:"connectors"`
	}
	typed struct {
		Type string `json:"type"`
	}
	connector struct {
		Type   string         `json:"type"`
		ID     string         `json:"id"`
		Name   string         `json:"name"`
		Config map[string]any `json:"config"`
	}
)

func configFor(issuer string, port int, o Options) ([]byte, error) {
	c := config{
		Issuer:  issuer,
		Storage: typed{Type: "memory"},
		Web:     map[string]any{"http": "127.0.0.1:" + strconv.Itoa(port)},
		OAuth2:  map[string]any{"passwordConnector": LocalConnector, "skipApprovalScreen": true},
		Logger:  map[string]any{"level": "info"},
		// Dex's own password database is the "local" connector; the authproxy one trusts the
		// X-Remote-User, X-Remote-User-Email and X-Remote-Group headers of its callback.
		EnablePasswordDB: true,
		Connectors:       []connector{{Type: "authproxy", ID: ProxyConnector, Name: "proxy", Config: map[string]any{}}},
		StaticPasswords:  []map[string]any{},
	}
	c.Expiry = map[string]any{}
	if o.Sessions {
		c.Sessions = map[string]any{}
	}
	if o.IDTokenTTL > 0 {
		c.Expiry["idTokens"] = o.IDTokenTTL.String()
	}
	if o.KeyRotation > 0 {
		c.Expiry["signingKeys"] = o.KeyRotation.String()
	}
	for _, cl := range o.Clients {
		m := map[string]any{"id": cl.ID, "name": cl.ID, "redirectURIs": cl.RedirectURIs}
		if cl.Public {
			m["public"] = true
		} else {
			m["secret"] = cl.Secret
		}
		c.StaticClients = append(c.StaticClients, m)
	}
	for i, u := range o.Users {
		hash, err := bcrypt.GenerateFromPassword([]byte(u.Password), bcrypt.DefaultCost)
		if err != nil {
			return nil, err
		}
		c.StaticPasswords = append(c.StaticPasswords, map[string]any{
			"email": u.Email, "hash": string(hash), "username": u.Name,
			"userID": fmt.Sprintf("user-%d", i), "groups": u.Groups, "emailVerified": !u.EmailUnverified,
		})
	}
	return json.MarshalIndent(c, "", "  ")
}
