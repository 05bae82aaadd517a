package productapi

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"k8s.io/client-go/rest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/productapi/apiv1"
	"github.com/inferplane/inferplane/productapi/clusterwatch"
)

// DefaultKeysNamespace is where API keys minted through the API are kept as APIKey objects
// when there is a host cluster: the gateway install's namespace, whose xDS servers watch it.
const DefaultKeysNamespace = "inferplane-system"

// DefaultPeerListen is where a replica with peers takes their writes: a port of its own, apart
// from the customers' (the install's Service exposes only that one).
const DefaultPeerListen = ":8081"

// Config is one `inferplane api serve` process.
type Config struct {
	// Listen is the address of the API (host:port).
	Listen string
	// OIDC configures sign-in; AdminGroups are the operator's groups.
	OIDC        access.VerifierConfig
	AdminGroups []string
	// Verifier replaces the OIDC verifier (tests of what follows sign-in).
	Verifier Verifier
	// Inputs is the inputs repository.
	Inputs inputsrepo.Options
	// WorkDir holds the tenant repositories' work trees; empty: a temporary folder.
	WorkDir string
	// Domain, RepoURL, GuestImage and StorageClass are generate's settings (they must equal
	// generate's, or the reconcile and generate would disagree).
	Domain, RepoURL, GuestImage, StorageClass string
	// TenantCredentialsDir holds a file per variable a tenant's spec.git.auth names (a
	// Kubernetes Secret mounted as a folder); a variable without a file is read from the
	// environment.
	TenantCredentialsDir string

	// Host reaches the host cluster; nil runs without one (HostMissing says why).
	Host        *rest.Config
	HostMissing string
	Registry    clusters.Options

	// KeysNamespace (with a host cluster) keeps keys as APIKey objects there; KeysFile keeps
	// them in a bbolt file instead (one replica, or a laptop). KeysSecretFile holds the HMAC
	// secret (else $INFERPLANE_KEYS_SECRET).
	KeysNamespace, KeysFile, KeysSecretFile string

	// Gateways are the admin URLs of every xds serve replica.
	Gateways []string
	// Meter is the admin URL of the meter (inferplane meter serve).
	Meter string

	RefreshInterval, ReconcileInterval time.Duration
	// PeerURL is where the other replicas reach this one, PeerTokenFile a file with the secret
	// they share: with both, writes are handed to the replica that pushed last (Options.PeerURL).
	PeerURL, PeerTokenFile string
	// PeerListen is the address of the peer route's own listener (host:port; default
	// DefaultPeerListen), served only with PeerURL; PeerBounds bound it, zero fields taking
	// serve.PeerHTTP.
	PeerListen string
	PeerBounds serve.HTTP
	// ShutdownTimeout is how long in-flight requests get after SIGTERM (default 20 s).
	ShutdownTimeout time.Duration
	Logger          *slog.Logger
	Version         string
	// Listening, when set, is told the address once the server listens (tests).
	Listening func(addr string)
	// Console, when set, builds the web console served at / beside the API: it is given the
	// API's handler (to call in process) and the address listened on.
	Console func(api http.Handler, addr string) (Console, error)
	// Bounds bound the server against slow and hostile clients; zero fields take
	// serve.PublicHTTP (docs/servers.md).
	Bounds serve.HTTP
}

// consoleMaxBody is the largest body the console's routes read: its audio upload of at most
// 32 MiB (console/playground.go) and the form's other fields.
const consoleMaxBody = 33 << 20

// bounds are c's bounds over the defaults, with the console's larger bodies on its routes.
func (c Config) bounds() serve.HTTP {
	b := c.Bounds.Over(serve.PublicHTTP())
	if b.BodyLimit == nil && c.Console != nil {
		api := b.MaxBodyBytes
		b.BodyLimit = func(r *http.Request) int64 {
			if strings.HasPrefix(r.URL.Path, Prefix+"/") {
				return api
			}
			return consoleMaxBody
		}
	}
	return b
}

// Console is the web console (console.Handler): Shutdown ends its live streams, which would
// otherwise hold the server's graceful shutdown.
type Console interface {
	http.Handler
	Shutdown()
}

// Serve runs the API until ctx ends, then shuts it down gracefully: new connections are
// refused, requests in flight (a write renders and pushes) get ShutdownTimeout. With peers
// (PeerURL) the peer route is served on PeerListen only, drained with the rest.
func Serve(ctx context.Context, c Config) error {
	log := cmp.Or(c.Logger, slog.Default())
	if c.PeerListen != "" && c.PeerURL == "" {
		return errors.New("--peer-listen without --peer-url: nothing listens for peers when there are none")
	}
	// The Kubernetes libraries' own logs (watches failing and retrying) go to the same log.
	ctrllog.SetLogger(logr.FromSlogHandler(log.Handler()))
	o, cleanup, err := c.options(ctx, log)
	if err != nil {
		return err
	}
	defer cleanup()
	srv, err := New(o)
	if err != nil {
		return err
	}
	servers, cons, err := c.listen(srv)
	if err != nil {
		return err
	}
	runCtx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	done := make(chan error, 1)
	go func() { done <- srv.Run(runCtx) }()
	served := make(chan error, len(servers))
	for _, s := range servers {
		s.hs.ErrorLog = slog.NewLogLogger(log.Handler(), slog.LevelWarn)
		go func() { served <- s.hs.Serve(s.ln) }()
	}
	log.Info("product API listening", "address", servers[0].ln.Addr().String(), "peers", servers.addr(1), "inputs", o.Inputs != nil,
		"clusters", o.Clusters != nil, "keys", o.Keys != nil, "gateways", len(o.Gateways))
	if c.Listening != nil {
		c.Listening(servers[0].ln.Addr().String())
	}
	select {
	case err := <-served:
		servers.close()
		return err
	case <-ctx.Done():
	}
	timeout := cmp.Or(c.ShutdownTimeout, 20*time.Second)
	log.Info("shutting down: finishing requests in flight", "timeout", timeout)
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), timeout)
	defer cancel()
	srv.Drain()
	if cons != nil {
		cons.Shutdown()
	}
	// The background fetches and reconciles stop at once, beside the requests' draining: a
	// fetch stuck on a slow git server must not hold the exit past the requests' timeout.
	stopRun()
	err = servers.shutdown(sctx)
	<-done
	if errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("shutdown: requests still in flight after %s", timeout)
	}
	return err
}

// server is one of api serve's HTTP servers on its listener.
type server struct {
	hs *http.Server
	ln *serve.Listener
}

// servers are api serve's: the customers' first, then the peers' when there are peers.
type servers []server

// listen opens the customers' listener, serving the API and the console beside it (which it
// returns), and with peers the peer route's own listener.
func (c Config) listen(srv *Server) (servers, Console, error) {
	bounds := c.bounds()
	ln, err := bounds.Listen(c.Listen)
	if err != nil {
		return nil, nil, fmt.Errorf("--listen %s: %w", c.Listen, err)
	}
	mux := http.NewServeMux()
	srv.Mount(mux)
	var cons Console
	if c.Console == nil {
		mux.Handle("/", securityHeaders(http.NotFoundHandler())) // the API's headers on every answer
	} else {
		if cons, err = c.Console(srv.Handler(), ln.Addr().String()); err != nil {
			ln.Close()
			return nil, nil, err
		}
		mux.Handle("/", cons)
	}
	out := servers{{bounds.Server(mux), ln}}
	if c.PeerURL == "" {
		return out, cons, nil
	}
	addr, pb := cmp.Or(c.PeerListen, DefaultPeerListen), c.PeerBounds.Over(serve.PeerHTTP())
	pln, err := pb.Listen(addr)
	if err != nil {
		ln.Close()
		if cons != nil {
			cons.Shutdown()
		}
		return nil, nil, fmt.Errorf("--peer-listen %s: %w", addr, err)
	}
	return append(out, server{pb.Server(srv.PeerHandler()), pln}), cons, nil
}

// addr is the address server i listens on, "" when there is none.
func (ss servers) addr(i int) string {
	if i >= len(ss) {
		return ""
	}
	return ss[i].ln.Addr().String()
}

func (ss servers) close() {
	for _, s := range ss {
		_ = s.hs.Close()
	}
}

// shutdown shuts every server down at once: each refuses new connections and finishes its
// requests in flight within ctx.
func (ss servers) shutdown(ctx context.Context) error {
	errs := make([]error, len(ss))
	var wg sync.WaitGroup
	for i, s := range ss {
		wg.Go(func() { errs[i] = s.hs.Shutdown(ctx) })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// options turn a Config into a Server's options.
func (c Config) options(ctx context.Context, log *slog.Logger) (Options, func(), error) {
	cleanup := func() {}
	repo, err := inputsrepo.Open(withLogger(c.Inputs, log))
	if err != nil {
		return Options{}, cleanup, err
	}
	v := c.Verifier
	if v == nil {
		ov, err := access.NewVerifier(c.OIDC)
		if err != nil {
			return Options{}, cleanup, err
		}
		v = ov
	}
	work := c.WorkDir
	if work == "" {
		if work, err = os.MkdirTemp("", "inferplane-api-"); err != nil {
			return Options{}, cleanup, err
		}
		cleanup = func() { _ = os.RemoveAll(work) }
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	o := Options{
		Inputs: repo, Verifier: v, Policy: access.Policy{AdminGroups: c.AdminGroups}, Domain: c.Domain,
		WorkDir: work, RepoURL: c.RepoURL, Render: render.Options{GuestImage: c.GuestImage, StorageClass: c.StorageClass},
		Getenv: credentialsFrom(c.TenantCredentialsDir), Gateways: c.Gateways, Meter: c.Meter,
		RefreshInterval: c.RefreshInterval, ReconcileInterval: c.ReconcileInterval,
		Logger: log, Registry: reg, Version: cmp.Or(c.Version, "dev"), NoClusterReason: c.HostMissing,
		SignIn: apiv1.SignIn{Issuer: c.OIDC.Issuer, ClientID: c.OIDC.ClientID, GroupsClaim: cmp.Or(c.OIDC.GroupsClaim, access.DefaultGroupsClaim)},
	}
	if c.PeerTokenFile != "" {
		b, err := os.ReadFile(c.PeerTokenFile)
		if err != nil {
			return Options{}, cleanup, fmt.Errorf("--peer-token-file: %w", err)
		}
		if o.PeerToken = strings.TrimSpace(string(b)); o.PeerToken == "" {
			return Options{}, cleanup, fmt.Errorf("--peer-token-file %s: the file is empty, expected the replicas' shared secret", c.PeerTokenFile)
		}
	}
	o.PeerURL = c.PeerURL
	if c.Host != nil {
		w := &clusterwatch.Watcher{Host: c.Host, Registry: c.Registry, Logger: log}
		if err := w.Start(ctx); err != nil {
			return Options{}, cleanup, fmt.Errorf("host cluster: %w", err)
		}
		o.Clusters = w
	} else if o.NoClusterReason == "" {
		o.NoClusterReason = "this API server runs without a host cluster (api serve without --kubeconfig or --context), so the clusters are not read"
	}
	o.Keys, o.Hasher, o.NoKeysReason = c.keyStore(log)
	return o, cleanup, nil
}

func withLogger(o inputsrepo.Options, log *slog.Logger) inputsrepo.Options {
	if o.Logger == nil {
		o.Logger = log
	}
	return o
}

// keyStore opens the store keys minted here go to: APIKey objects in the host cluster (every
// API and gateway replica sees them through its watch), else the bbolt file (one machine).
func (c Config) keyStore(log *slog.Logger) (keys.Store, *keys.Hasher, string) {
	secret, err := keys.LoadSecret(c.KeysSecretFile)
	if err != nil {
		log.Warn("API keys disabled", "reason", err)
		return nil, nil, err.Error() + " (--keys-secret-file)"
	}
	h, err := keys.NewHasher(secret)
	if err != nil {
		return nil, nil, err.Error()
	}
	switch {
	case c.KeysFile != "":
		if err := os.MkdirAll(filepath.Dir(c.KeysFile), 0o700); err != nil {
			return nil, nil, err.Error()
		}
		return keys.NewFileStore(c.KeysFile), h, ""
	case c.Host != nil:
		s, err := keys.NewKubeStore(c.Host, cmp.Or(c.KeysNamespace, DefaultKeysNamespace))
		if err != nil {
			return nil, nil, err.Error()
		}
		return s, h, ""
	}
	return nil, nil, "no key store: pass --keys-file (a bbolt file) or a host cluster (--kubeconfig) whose APIKey objects keep them"
}

// credentialsFrom reads a variable from dir/<name> when that file exists, else from the
// environment.
func credentialsFrom(dir string) func(string) string {
	return func(name string) string {
		if dir != "" && name != "" && !strings.ContainsAny(name, "/\\") {
			if b, err := os.ReadFile(filepath.Join(dir, name)); err == nil {
				return strings.TrimSpace(string(b))
			}
		}
		return os.Getenv(name)
	}
}
