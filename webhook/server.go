package webhook

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/go-logr/logr"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/healthz"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"
	"sigs.k8s.io/controller-runtime/pkg/manager"
	ctrlmetrics "sigs.k8s.io/controller-runtime/pkg/metrics"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	ctrlwebhook "sigs.k8s.io/controller-runtime/pkg/webhook"
	"sigs.k8s.io/controller-runtime/pkg/webhook/admission"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// Defaults of ServeOptions.
const (
	DefaultPort             = 9443
	DefaultMetricsPort      = 8080
	DefaultProbePort        = 8081
	DefaultCertDir          = "/tmp/k8s-webhook-server/serving-certs"
	DefaultCertSyncInterval = time.Minute
	DefaultShutdownTimeout  = 30 * time.Second
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
	Logger          logr.Logger
}

// Scheme holds the kinds the server reads: the built-in ones and inferplane's.
func Scheme() *runtime.Scheme {
	s := runtime.NewScheme()
	for _, add := range []func(*runtime.Scheme) error{clientgoscheme.AddToScheme, v1alpha1.AddToScheme} {
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

	mgr, err := manager.New(cfg, manager.Options{
		Scheme:                  scheme,
		Logger:                  o.Logger,
		Metrics:                 metricsserver.Options{BindAddress: o.MetricsAddr},
		HealthProbeBindAddress:  o.ProbeAddr,
		GracefulShutdownTimeout: &o.ShutdownTimeout,
		Cache:                   cache.Options{DefaultTransform: cache.TransformStripManagedFields()},
		WebhookServer:           ctrlwebhook.NewServer(ctrlwebhook.Options{Host: o.Host, Port: o.Port, CertDir: o.CertDir}),
	})
	if err != nil {
		return fmt.Errorf("webhook manager: %w", err)
	}
	// Start the three informers with the manager, so that readiness covers them and the first
	// admission does not wait for a list.
	for _, obj := range []client.Object{&v1alpha1.Tenant{}, &v1alpha1.NodeType{}, &v1alpha1.ModelMaster{}} {
		if _, err := mgr.GetCache().GetInformer(ctx, obj); err != nil {
			return fmt.Errorf("watch %T: %w", obj, err)
		}
	}
	metrics, err := NewMetrics(ctrlmetrics.Registry)
	if err != nil {
		return err
	}
	src := policy.ClientSource{Reader: mgr.GetClient(), Live: mgr.GetAPIReader()}
	Register(mgr.GetWebhookServer(), src, metrics, o.Logger.WithName("admission"))

	if err := mgr.AddHealthzCheck("ping", healthz.Ping); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("webhook", mgr.GetWebhookServer().StartedChecker()); err != nil {
		return err
	}
	if err := mgr.AddReadyzCheck("policy-cache", cacheSynced(mgr.GetCache())); err != nil {
		return err
	}
	if certs != nil {
		cs, dir, every, log := o.CertSecret, o.CertDir, o.CertSyncInterval, o.Logger.WithName("certs")
		if err := mgr.Add(manager.RunnableFunc(func(ctx context.Context) error {
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
		})); err != nil {
			return err
		}
	}
	o.Logger.Info("webhook serving", "port", o.Port, "metrics", o.MetricsAddr, "probes", o.ProbeAddr)
	return mgr.Start(ctx)
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

// Register adds the four admission endpoints (Endpoints) to a webhook server.
func Register(srv ctrlwebhook.Server, src policy.Source, m *Metrics, log logr.Logger) {
	for _, ep := range Endpoints {
		srv.Register(ep.Path, NewWebhook(ep.Kind, src, m, log))
	}
}

// NewWebhook is the HTTP handler of one endpoint: controller-runtime's AdmissionReview
// decoding and encoding around a Handler (with panics turned into 500 responses), logging to
// log.
func NewWebhook(kind schema.GroupKind, src policy.Source, m *Metrics, log logr.Logger) http.Handler {
	hook := &admission.Webhook{Handler: &Handler{Kind: kind, Source: src, Metrics: m, Log: log}}
	h, err := admission.StandaloneWebhook(hook, admission.StandaloneOptions{Logger: log})
	if err != nil {
		return hook // only a metrics path can make it fail, and none is given
	}
	return h
}

// Mux serves the four endpoints without TLS, a manager or a cache: for tests and benchmarks.
func Mux(src policy.Source, m *Metrics) *http.ServeMux {
	mux := http.NewServeMux()
	for _, ep := range Endpoints {
		mux.Handle(ep.Path, NewWebhook(ep.Kind, src, m, logr.Discard()))
	}
	return mux
}
