package webhook

import (
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/runtime"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/internal/serve"
	"github.com/inferplane/inferplane/policy"
	"github.com/inferplane/inferplane/webhook/install"
)

// Defaults of ServeOptions (the ports and drain time are the ones the install manifests use).
const (
	DefaultPort             = install.Port
	DefaultMetricsPort      = install.MetricsPort
	DefaultProbePort        = install.ProbePort
	DefaultCertDir          = "/tmp/k8s-webhook-server/serving-certs"
	DefaultCertSyncInterval = time.Minute
	DefaultShutdownTimeout  = install.ShutdownTimeout
)

// The default addresses of /metrics and the probes: every interface, the default ports (which
// the install manifests also expose).
var (
	DefaultMetricsAddr = ":" + strconv.Itoa(DefaultMetricsPort)
	DefaultProbeAddr   = ":" + strconv.Itoa(DefaultProbePort)
)

// ServeOptions configure Serve.
type ServeOptions struct {
	// Host and Port the webhook listens on (TLS); Port defaults to 9443.
	Host string
	Port int
	// CertDir holds tls.crt and tls.key; the server reloads them when they change.
	CertDir string
	// MetricsAddr serves Prometheus /metrics ("0" turns it off); ProbeAddr serves /healthz and
	// /readyz ("0" turns it off).
	MetricsAddr string
	ProbeAddr   string
	// CertSecret, when set, keeps the serving certificate in a Secret and the CA in the
	// webhook configuration (see CertSecret); its Client is filled in by Serve.
	CertSecret       *CertSecret
	CertSyncInterval time.Duration
	// ShutdownTimeout bounds the drain of in-flight requests on SIGTERM.
	ShutdownTimeout time.Duration
	// ClientCAFile, when set, is a PEM bundle of the CAs whose client certificates the webhook
	// accepts: a TLS client without one is refused in the handshake, so only the API server
	// (configured with a client certificate for the webhook, docs/webhook.md) reaches the port.
	ClientCAFile string
	// Guard bounds what the webhook reads and decodes at once (zero: the defaults).
	Guard GuardOptions
	// Bounds bound the webhook's server against slow and hostile clients (zero fields:
	// serve.WebhookHTTP; docs/servers.md).
	Bounds serve.HTTP
	// AdminBounds bound the /metrics and probe servers (zero fields: serve.AdminHTTP).
	AdminBounds serve.HTTP
	Logger      logr.Logger
}

// Scheme holds the kinds the server reads: the built-in ones, inferplane's and KubeVirt's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, policy.AddToScheme} {
		if err := add(s); err != nil {
			panic(err) // a static list of generated registrations
		}
	}
	return s
}

// Serve runs the webhook until ctx ends, then drains in-flight requests and returns. Policy data
// comes from a cache of the cluster's Tenants, NodeTypes and ModelMasters; /readyz is ready once
// that cache has synced and the TLS listener is up.
func Serve(ctx context.Context, cfg *rest.Config, o ServeOptions) error {
	o.Port = cmp.Or(o.Port, DefaultPort)
	o.CertDir = cmp.Or(o.CertDir, DefaultCertDir)
	o.MetricsAddr = cmp.Or(o.MetricsAddr, DefaultMetricsAddr)
	o.ProbeAddr = cmp.Or(o.ProbeAddr, DefaultProbeAddr)
	o.CertSyncInterval = cmp.Or(o.CertSyncInterval, DefaultCertSyncInterval)
	o.ShutdownTimeout = cmp.Or(o.ShutdownTimeout, DefaultShutdownTimeout)
	if o.Logger.GetSink() == nil {
		o.Logger = logr.Discard()
	}
	ctrllog.SetLogger(o.Logger)
	scheme := Scheme()

	var certs *Bundle
	if o.CertSecret != nil {
		direct, err := client.New(cfg, client.Options{Scheme: scheme})
		if err != nil {
			return fmt.Errorf("client for the serving certificate: %w", err)
		}
		o.CertSecret.Client = direct
		certs = &Bundle{}
		if err := o.CertSecret.Sync(ctx, o.CertDir, certs); err != nil {
			return err
		}
	}
	tlsOpts, err := clientAuth(o.ClientCAFile)
	if err != nil {
		return err
	}
	o.Bounds, o.AdminBounds = o.Bounds.Over(serve.WebhookHTTP()), o.AdminBounds.Over(serve.AdminHTTP())
	if o.Guard.MaxRequestBytes > 0 {
		o.Bounds.MaxBodyBytes = o.Guard.MaxRequestBytes
	}
	mgr, err := manager.New(cfg, manager.Options{
		Scheme: scheme,
		Logger: o.Logger,
		// /metrics and the probes are served by adminServers within o.AdminBounds:
		// controller-runtime's own servers take an address and nothing else (docs/servers.md).
		Metrics:                 metricsserver.Options{BindAddress: "0"},
		GracefulShutdownTimeout: &o.ShutdownTimeout,
		Cache:                   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		WebhookServer:           newBoundedServer(o, tlsOpts),
	})
	if err != nil {
		return fmt.Errorf("webhook manager: %w", err)
	}
	ready, err := setUp(ctx, mgr, o)
	if err != nil {
		return err
	}
	if certs != nil {
		if err := mgr.Add(certSync(o, certs)); err != nil {
			return err
		}
	}
	closeAdmin, err := adminServers(mgr, o, ready)
	if err != nil {
		return err
	}
	// The manager closes them as it stops; this closes them when it never started.
	defer closeAdmin()
	o.Logger.Info("webhook serving", "port", o.Port, "metrics", o.MetricsAddr, "probes", o.ProbeAddr,
		"clientCertificates", o.ClientCAFile != "")
	return mgr.Start(ctx)
}

// setUp starts the policy data informers with the manager (so readiness covers them and the
// first admission does not wait for a list), registers the endpoints, and returns the
// readiness checks.
func setUp(ctx context.Context, mgr manager.Manager, o ServeOptions) (map[string]healthz.Checker, error) {
	for _, obj := range []client.Object{&v1alpha1.Tenant{}, &v1alpha1.NodeType{}, &v1alpha1.ModelMaster{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return nil, fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	metrics, err := NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return nil, err
	}
	o.Guard.Metrics = metrics
	src := ClientSource{Reader: mgr.GetClient(), Live: mgr.GetAPIReader()}
	handlers, err := Handlers(NewGuard(o.Guard), src, metrics, o.Logger.WithName("admission"))
	if err != nil {
		return nil, err
	}
	for path, h := range handlers {
		mgr.GetWebhookServer().Register(path, h)
	}
	return map[string]healthz.Checker{"webhook": mgr.GetWebhookServer().StartedChecker(),
		"policy-cache": cacheSynced(mgr.GetCache())}, nil
}

// adminServers serves /metrics (controller-runtime's registry, which holds the webhook's own
// metrics) on o.MetricsAddr and the probes on o.ProbeAddr ("0": not served), each on a server
// and listener of o.AdminBounds that the manager runs from its start, before the caches sync
// (as its own would). closeAll closes their listeners.
func adminServers(mgr manager.Manager, o ServeOptions, ready map[string]healthz.Checker) (closeAll func(), err error) {
	metrics := http.NewServeMux()
	metrics.Handle("GET /metrics", promhttp.HandlerFor(ctrlmetrics.Registry, promhttp.HandlerOpts{ErrorHandling: promhttp.HTTPErrorOnError}))
	probes := http.NewServeMux()
	for path, checks := range map[string]map[string]healthz.Checker{"/healthz": {"ping": healthz.Ping}, "/readyz": ready} {
		// The aggregate at the path, one check at path/name (`?verbose` lists them).
		h := http.StripPrefix(path, &healthz.Handler{Checks: checks})
		probes.Handle("GET "+path, h)
		probes.Handle("GET "+path+"/", h)
	}
	var opened []*serve.Listener
	closeAll = func() {
		for _, l := range opened {
			_ = l.Close()
		}
	}
	for _, s := range []struct {
		name, flag, addr string
		mux              *http.ServeMux
	}{{"metrics", "--metrics-bind-address", o.MetricsAddr, metrics}, {"health probe", "--health-probe-bind-address", o.ProbeAddr, probes}} {
		if s.addr == "0" {
			continue
		}
		l, err := o.AdminBounds.Listen(s.addr)
		if err != nil {
			closeAll()
			return nil, fmt.Errorf("%s %s: %w", s.flag, s.addr, err)
		}
		opened = append(opened, l)
		srv := &manager.Server{Name: s.name, Server: o.AdminBounds.Server(s.mux), Listener: l, ShutdownTimeout: &o.ShutdownTimeout}
		if err := mgr.Add(srv); err != nil {
			closeAll()
			return nil, err
		}
	}
	return closeAll, nil
}

// certSync re-checks the serving certificate Secret every interval.
func certSync(o ServeOptions, certs *Bundle) manager.Runnable {
	cs, dir, every, log := o.CertSecret, o.CertDir, o.CertSyncInterval, o.Logger.WithName("certs")
	return manager.RunnableFunc(func(ctx context.Context) error {
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return nil
			case <-t.C:
				if err := cs.Sync(ctx, dir, certs); err != nil {
					log.Error(err, "serving certificate sync failed; retrying", "every", every)
				}
			}
		}
	})
}

// clientAuth requires TLS clients to present a certificate signed by a CA in caFile ("": any
// client may connect).
func clientAuth(caFile string) ([]func(*tls.Config), error) {
	if caFile == "" {
		return nil, nil
	}
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("client CA: %w", err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("client CA %s: no PEM certificate in it", caFile)
	}
	return []func(*tls.Config){func(c *tls.Config) {
		c.ClientCAs = pool
		c.ClientAuth = tls.RequireAndVerifyClientCert
	}}, nil
}

func cacheSynced(c cache.Cache) healthz.Checker {
	return func(req *http.Request) error {
		ctx, cancel := context.WithTimeout(req.Context(), 500*time.Millisecond)
		defer cancel()
		if !c.WaitForCacheSync(ctx) {
			return errors.New("the policy data cache has not synced yet")
		}
		return nil
	}
}
