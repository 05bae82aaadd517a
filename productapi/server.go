// Package productapi is the product API (`inferplane api serve`): the customers' front door.
// A stateless HTTP server (run several replicas) whose state lives in git (the inputs, through
// inputsrepo) and in the clusters (what runs, read from watch caches). JSON under /api/v1,
// described by an OpenAPI 3.1 document generated from the handlers' Go types (huma v2, at
// /api/v1/openapi.json); errors are RFC 9457 problem details carrying the generator's own
// field paths and words.
//
// Every request is signed in (an OIDC bearer token, access.Verifier) and decided per tenant
// (access.Policy, the roles of spec.access). A write applies one change to the caller's tenant,
// checks it with the generator for that tenant only, commits the inputs as the caller and then
// renders and pushes that tenant's repository; a reconcile loop in every replica renders any
// tenant whose repository lags the inputs, so a replica that dies between the two pushes leaves
// nothing behind for long.
//
// The root path is left free: Mount adds the API to a mux that can also serve a console.
package productapi

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/danielgtaylor/huma/v2"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/inferplane/inferplane/access"
	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/generator/render"
	"github.com/inferplane/inferplane/inputsrepo"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/joblogs"
	"github.com/inferplane/inferplane/lifecycle/cluster"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/productapi/apiv1"
)

// Prefix is where the API lives.
const Prefix = "/api/v1"

// Verifier turns a bearer token into an identity (*access.Verifier).
type Verifier interface {
	Verify(ctx context.Context, raw string) (access.Identity, error)
}

// ClusterReader reads what the clusters hold of a tenant, from watch caches
// (clusterwatch.Watcher), and restarts a job's VMs.
type ClusterReader interface {
	// Objects are the tenant's Applications (host cluster) and workloads (its own cluster).
	Objects(ctx context.Context, t cluster.Tenant) (*cluster.Objects, error)
	// Restart restarts a job's VMs (one replica's when replica >= 0).
	Restart(ctx context.Context, t cluster.Tenant, job string, replica int32) ([]cluster.Restarted, error)
}

// Options configure a Server.
type Options struct {
	// Inputs is this replica's clone of the inputs repository.
	Inputs *inputsrepo.Repo
	// Verifier checks bearer tokens; Policy decides per tenant.
	Verifier Verifier
	Policy   access.Policy
	// Realm is the realm of WWW-Authenticate challenges (default "inferplane").
	Realm string
	// SignIn is what GET /api/v1/signin tells clients (the issuer and client id sign-in uses).
	SignIn apiv1.SignIn
	// Domain makes endpoint URLs https://<job>.<tenant>.<domain>; empty leaves them out.
	Domain string

	// WorkDir holds this replica's work trees of the tenant repositories (<WorkDir>/<tenant>);
	// for a tenant without spec.git.url it is the repository itself.
	WorkDir string
	// RepoURL is the Argo CD source URL of tenants without spec.git.url (generate's --repo-url).
	RepoURL string
	// Render holds generate's render settings (guest image, storage class).
	Render render.Options
	// Getenv reads the credentials a tenant's spec.git.auth names. Nil: os.Getenv.
	Getenv func(string) string

	// Clusters reads the clusters; nil runs without a host cluster (stages are unknown, with
	// the reason, and restarts are refused).
	Clusters ClusterReader
	// NoClusterReason says why Clusters is nil, for the stages' reason.
	NoClusterReason string

	// Keys is the key store of API keys minted here, Hasher the server secret's HMAC; nil
	// refuses key writes with the reason in NoKeysReason.
	Keys         keys.Store
	Hasher       *keys.Hasher
	NoKeysReason string

	// Gateways are the admin URLs of every gateway (xds serve) replica: usage and health are
	// summed over them; the stages read the first that answers.
	Gateways []string
	// Meter is the admin URL of the meter (inferplane meter serve): the usage route's GPU-seconds
	// and recorded tokens come from it.
	Meter string

	// RefreshInterval is how often the inputs are fetched for reads (default 2 s); a write
	// refreshes at once. ReconcileInterval is how often every tenant is reconciled (default
	// 30 s; negative: never, for tests that drive Reconcile themselves).
	RefreshInterval   time.Duration
	ReconcileInterval time.Duration

	// PeerURL is where the other replicas reach this one's PeerHandler (e.g.
	// http://<pod name>.<headless Service>:8081), and PeerToken the secret the replicas share:
	// with both, writes are handed to the replica that pushed last (peers.go). Empty: every
	// write is pushed by the replica that got it.
	PeerURL, PeerToken string

	Logger   *slog.Logger
	Registry prometheus.Registerer
	Now      func() time.Time
	// Version is the server's version, in the OpenAPI document.
	Version string
}

// Server is one replica of the product API.
type Server struct {
	opts    Options
	log     *slog.Logger
	api     huma.API
	mux     *http.ServeMux
	peerMux *http.ServeMux // the peer route alone, served apart from the customers' port
	metrics *metrics

	view    atomic.Pointer[view]
	ready   atomic.Bool
	health  serve.Health
	cache   *tenantCache
	publish *publisher
	gw      *gatewayCache
	recon   *inputsrepo.Reconciler
	keyIdem *idemCache
	// statuses keeps the agents' statuses the stages read, briefly (jobstatus.Reader).
	statuses joblogs.StatusCache
	// logRate bounds the console lines all log follows read a second (logLimit).
	logRate     *rate.Limiter
	logRateOnce sync.Once
	decoded     *policy.DecodeCache // the rendered files the admission check decoded

	refreshMu sync.Mutex

	peerHTTP      *http.Client
	noFollowUntil atomic.Int64 // unix nanoseconds: the writer peer is not followed before
}

// New checks the options and builds the handlers; it reaches no network (Run does).
func New(o Options) (*Server, error) {
	var errs []error
	if o.Inputs == nil {
		errs = append(errs, errors.New("productapi: no inputs repository (--inputs-repo)"))
	}
	if o.Verifier == nil {
		errs = append(errs, errors.New("productapi: no token verifier (--oidc-issuer, --oidc-client-id)"))
	}
	if o.WorkDir == "" {
		errs = append(errs, errors.New("productapi: no work folder for the tenant repositories (--work-dir)"))
	}
	if (o.PeerURL == "") != (o.PeerToken == "") {
		errs = append(errs, errors.New("productapi: a peer URL needs the peer token the replicas share, and the other way round (--peer-url, --peer-token-file)"))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	o.Realm = cmp.Or(o.Realm, "inferplane")
	o.RefreshInterval = cmp.Or(o.RefreshInterval, 2*time.Second)
	o.ReconcileInterval = cmp.Or(o.ReconcileInterval, 30*time.Second)
	if o.Getenv == nil {
		o.Getenv = os.Getenv
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.Logger == nil {
		o.Logger = slog.New(slog.DiscardHandler)
	}
	if o.Registry == nil {
		o.Registry = prometheus.NewRegistry()
	}
	s := &Server{opts: o, log: o.Logger, cache: newTenantCache(), gw: newGatewayCache(o.Gateways), keyIdem: newIdemCache(10 * time.Minute), decoded: &policy.DecodeCache{}}
	s.publish = &publisher{s: s}
	s.peerHTTP = &http.Client{Timeout: 2 * time.Minute}
	if o.PeerURL != "" {
		o.Inputs.SetWriterID(writerID(o.PeerURL, o.PeerToken))
	}
	s.recon = &inputsrepo.Reconciler{Inputs: o.Inputs, Tenants: s.reconcileTenants, Render: s.reconcileRender}
	m, err := newMetrics(o.Registry)
	if err != nil {
		return nil, err
	}
	s.metrics = m
	s.mux = http.NewServeMux()
	s.api = s.newAPI(s.mux)
	s.register()
	s.peerMux = http.NewServeMux()
	s.peerMux.HandleFunc("POST "+peerPath, s.takeSubmit)
	return s, nil
}

// OpenAPI is the API's OpenAPI document (what /api/v1/openapi.json serves).
func (s *Server) OpenAPI() *huma.OpenAPI { return s.api.OpenAPI() }

// Handler serves the API, /healthz, /readyz and /metrics, each answer with the headers that
// keep browsers from framing or sniffing it (securityHeaders). The root path is free: mount a
// console beside it with Mount. The peer route is not among them (PeerHandler).
func (s *Server) Handler() http.Handler { return securityHeaders(s.metrics.wrap(s.mux)) }

// PeerHandler serves the peer route alone (the prepared changes the other replicas hand this
// one, behind the peers' token), on a listener of its own that customers never reach: the
// customers' port answers it 404, as any path it does not serve. Its requests are counted in
// /metrics with the API's.
func (s *Server) PeerHandler() http.Handler { return securityHeaders(s.metrics.wrap(s.peerMux)) }

// Mount adds the API's routes to mux (which may serve a console at /). /internal/ goes to the
// API too, which serves nothing there: whatever serves / never answers a replicas' route on
// the customers' port.
func (s *Server) Mount(mux *http.ServeMux) {
	mux.Handle(Prefix+"/", s.Handler())
	for _, p := range []string{"/healthz", "/readyz", "/metrics", "/internal/"} {
		mux.Handle(p, s.Handler())
	}
}

// Run fetches the inputs (ready once it has), then refreshes them every RefreshInterval and
// reconciles every tenant every ReconcileInterval, until ctx ends.
func (s *Server) Run(ctx context.Context) error {
	refresh := time.NewTicker(s.opts.RefreshInterval)
	defer refresh.Stop()
	var reconcile <-chan time.Time
	if s.opts.ReconcileInterval > 0 {
		t := time.NewTicker(s.opts.ReconcileInterval)
		defer t.Stop()
		reconcile = t.C
	}
	if err := s.Refresh(ctx); err != nil {
		s.log.Warn("inputs: first fetch failed; retrying", "error", err)
	} else if s.opts.ReconcileInterval > 0 {
		s.Reconcile(ctx)
	}
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-refresh.C:
			if err := s.Refresh(ctx); err != nil && ctx.Err() == nil {
				s.log.Warn("inputs: fetch failed; reads go on from the last fetch", "error", err)
			}
		case <-reconcile:
			s.Reconcile(ctx)
		}
	}
}

// Reconcile renders every tenant whose repository lags the inputs (inputsrepo.Reconciler).
func (s *Server) Reconcile(ctx context.Context) []inputsrepo.Outcome {
	start := time.Now()
	head, outs, err := s.recon.Run(ctx)
	rendered := 0
	for _, o := range outs {
		if o.Status == inputsrepo.Rendered {
			rendered++
			s.log.Info("reconcile: tenant rendered", "tenant", o.Tenant, "from", short(o.From), "inputs", short(head), "committed", o.Committed)
		}
	}
	s.metrics.reconciles.WithLabelValues(result(err)).Inc()
	if err != nil && ctx.Err() == nil {
		s.log.Warn("reconcile: some tenants failed", "inputs", short(head), "error", err)
	}
	s.log.Debug("reconcile done", "tenants", len(outs), "rendered", rendered, "took", time.Since(start))
	return outs
}

func result(err error) string {
	if err != nil {
		return "error"
	}
	return "ok"
}

func short(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	return c
}

// inputsFetched is /readyz's check: a replica is ready once it has fetched the inputs.
func (s *Server) inputsFetched() (string, error) {
	if !s.ready.Load() {
		return "", errors.New("the inputs repository has not been fetched yet")
	}
	return "inputs at " + short(s.view.Load().commit), nil
}

// Drain turns /readyz to 503 for good: the replica is shutting down, and what routes to it
// takes it out while the requests in flight finish.
func (s *Server) Drain() { s.health.Drain() }

// InputsStats are the counts of this replica's inputs writer (batches, pushes, refusals,
// commits), for the benchmarks.
func (s *Server) InputsStats() inputsrepo.Stats { return s.opts.Inputs.Stats() }
