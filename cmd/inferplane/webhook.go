package main

import (
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/go-logr/logr"
	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/types"

	"github.com/inferplane/inferplane/internal/kubeconfig"
	"github.com/inferplane/inferplane/webhook"
	"github.com/inferplane/inferplane/webhook/install"
)

func newWebhookCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "webhook",
		Short: "The admission webhook: serve it, or print its install manifests",
		Long: `The admission webhook re-checks, inside the cluster, every ManagedInferenceJob, ModelMaster,
VirtualMachine and VirtualMachineInstance labelled inferplane.io/tenant that Argo CD (or anyone)
creates or updates, with the same rules as ` + "`inferplane validate`" + ` and the generator: GPU counts,
replica layout, allowed node types and GPU devices. See docs/webhook.md.`,
		Example: `  inferplane webhook manifests | kubectl apply -f -
  inferplane webhook serve --dev --kubeconfig ~/.kube/dev`,
	}
	cmd.AddCommand(newWebhookServeCmd(), newWebhookManifestsCmd())
	return cmd
}

// webhookServeFlags are webhook serve's flags.
type webhookServeFlags struct {
	o                                   webhook.ServeOptions
	kubeconfig, kubeCtx                 string
	dev                                 bool
	devHosts                            []string
	tlsSecret, service, vwcName, logLvl string
}

func newWebhookServeCmd() *cobra.Command {
	var w webhookServeFlags
	cmd := &cobra.Command{
		Use:   "serve",
		Short: "Run the admission webhook server",
		Long: `serve runs the webhook until SIGINT or SIGTERM, then drains in-flight requests and exits.

Policy data (Tenants, NodeTypes, ModelMasters) is read from the cluster through a cache
(kubeconfig: --kubeconfig, $KUBECONFIG, ~/.kube/config, or in-cluster).

Serving certificate, one of:
  --cert-dir DIR      tls.crt and tls.key in DIR (e.g. a mounted Secret); reloaded on change
  --tls-secret NS/NAME --service NS/NAME --webhook-configuration NAME
                      in cluster (what the install manifests use): the certificate is kept in
                      that Secret, created and renewed by the webhook, and its CA is written
                      into the configuration's caBundle
  --dev               a self-signed pair for --dev-hosts, written to --cert-dir (a temporary
                      folder by default); the CA bundle is printed for the configuration

Endpoints: the webhook on --port (TLS, /validate/<resource>); /healthz and /readyz on
--health-probe-bind-address (ready once the policy cache has synced); Prometheus /metrics on
--metrics-bind-address.`,
		Example: `  # On a workstation against a dev cluster
  inferplane webhook serve --dev --kubeconfig ~/.kube/dev --port 9443
  inferplane webhook manifests --url https://<this host>:9443 --ca-bundle-file <cert dir>/ca.crt | kubectl apply -f -`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return w.run(cmd) },
	}
	f := cmd.Flags()
	f.StringVar(&w.o.Host, "host", "", "address the webhook listens on (default: all)")
	f.IntVar(&w.o.Port, "port", webhook.DefaultPort, "TLS port of the webhook")
	f.StringVar(&w.o.CertDir, "cert-dir", "", "folder of tls.crt and tls.key (default "+webhook.DefaultCertDir+"; with --dev a new temporary folder)")
	f.StringVar(&w.o.MetricsAddr, "metrics-bind-address", webhook.DefaultMetricsAddr, `address of Prometheus /metrics ("0" turns it off)`)
	f.StringVar(&w.o.ProbeAddr, "health-probe-bind-address", webhook.DefaultProbeAddr, `address of /healthz and /readyz ("0" turns them off)`)
	f.DurationVar(&w.o.ShutdownTimeout, "shutdown-timeout", webhook.DefaultShutdownTimeout, "how long in-flight requests may take to finish after SIGTERM")
	f.DurationVar(&w.o.CertSyncInterval, "cert-sync-interval", webhook.DefaultCertSyncInterval, "with --tls-secret: how often the Secret and caBundle are checked")
	f.StringVar(&w.kubeconfig, "kubeconfig", "", "kubeconfig file (default: $KUBECONFIG, ~/.kube/config, or in-cluster)")
	f.StringVar(&w.kubeCtx, "context", "", "kubeconfig context (default: the current one)")
	f.BoolVar(&w.dev, "dev", false, "make a self-signed certificate for --dev-hosts and print its CA bundle")
	f.StringSliceVar(&w.devHosts, "dev-hosts", []string{"localhost", "127.0.0.1"}, "with --dev: the names and addresses the certificate covers")
	f.StringVar(&w.tlsSecret, "tls-secret", "", "NAMESPACE/NAME of the Secret that keeps the serving certificate (in cluster)")
	f.StringVar(&w.service, "service", "", "with --tls-secret: NAMESPACE/NAME of the webhook's Service (the certificate's host names)")
	f.StringVar(&w.vwcName, "webhook-configuration", install.DefaultConfigurationName, "with --tls-secret: the ValidatingWebhookConfiguration whose caBundle the webhook fills in")
	f.StringVar(&w.o.ClientCAFile, "client-ca-file", "", "PEM file of the CAs whose client certificates may call the webhook: clients without one are refused (docs/webhook.md)")
	f.StringVar(&w.logLvl, "log-level", "info", "log level: debug (every decision), info (denials and errors), warn or error")
	return cmd
}

// run checks the flags, then the cluster, and only then makes a dev certificate and serves.
func (w *webhookServeFlags) run(cmd *cobra.Command) error {
	logger, err := webhookLogger(cmd.ErrOrStderr(), w.logLvl)
	if err != nil {
		return usageErr(err)
	}
	w.o.Logger = logger
	switch {
	case w.dev && w.tlsSecret != "":
		return usageErr(errors.New("--dev and --tls-secret both choose the certificate: give one"))
	case w.tlsSecret != "":
		cs, err := webhookCertSecret(w.tlsSecret, w.service, w.vwcName)
		if err != nil {
			return usageErr(err)
		}
		w.o.CertSecret = cs
	case !w.dev:
		if err := checkCertDir(w.o.CertDir); err != nil {
			return err
		}
	}
	// The cluster before the dev certificate: nothing is created or printed for a server that
	// cannot start.
	cfg, err := kubeconfig.Load(w.kubeconfig, w.kubeCtx)
	if err != nil {
		return usageErr(err)
	}
	if w.dev {
		cleanup, err := webhookDevCerts(cmd.OutOrStdout(), &w.o, w.devHosts)
		if err != nil {
			return err
		}
		defer cleanup()
	}
	return webhook.Serve(cmd.Context(), cfg, w.o)
}

func webhookLogger(w io.Writer, level string) (logr.Logger, error) {
	var l slog.Level
	if err := l.UnmarshalText([]byte(level)); err != nil {
		return logr.Logger{}, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	return logr.FromSlogHandler(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: l})), nil
}

// checkCertDir wants a serving certificate in dir ("": the default).
func checkCertDir(dir string) error {
	if dir == "" {
		dir = webhook.DefaultCertDir
	}
	for _, f := range []string{webhook.CertFile, webhook.KeyFile} {
		if _, err := os.Stat(filepath.Join(dir, f)); err != nil {
			return usageErr(fmt.Errorf("no %s in %s: mount a serving certificate there (--cert-dir), "+
				"or use --tls-secret (in cluster) or --dev", f, dir))
		}
	}
	return nil
}

func webhookNamespacedName(flag, v string) (types.NamespacedName, error) {
	ns, name, ok := strings.Cut(v, "/")
	if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
		return types.NamespacedName{}, fmt.Errorf("%s %q: want NAMESPACE/NAME", flag, v)
	}
	return types.NamespacedName{Namespace: ns, Name: name}, nil
}

func webhookCertSecret(secret, service, vwc string) (*webhook.CertSecret, error) {
	sec, err := webhookNamespacedName("--tls-secret", secret)
	if err != nil {
		return nil, err
	}
	if service == "" {
		return nil, errors.New("--tls-secret needs --service NAMESPACE/NAME: the certificate is issued for the Service's names")
	}
	svc, err := webhookNamespacedName("--service", service)
	if err != nil {
		return nil, err
	}
	return &webhook.CertSecret{Secret: sec, Hosts: webhook.Hosts(svc.Namespace, svc.Name), WebhookConfiguration: vwc}, nil
}

// webhookDevCerts writes a self-signed pair and prints the CA bundle and how to register it.
// cleanup removes the temporary folder it made (none when --cert-dir was given).
func webhookDevCerts(out io.Writer, o *webhook.ServeOptions, hosts []string) (cleanup func(), err error) {
	cleanup = func() {}
	b, err := webhook.SelfSigned(hosts, time.Now(), 30*24*time.Hour)
	if err != nil {
		return cleanup, usageErr(err)
	}
	if o.CertDir == "" {
		dir, err := os.MkdirTemp("", "inferplane-webhook-dev-")
		if err != nil {
			return cleanup, err
		}
		o.CertDir = dir
		cleanup = func() { _ = os.RemoveAll(dir) }
	}
	if err := b.WriteDir(o.CertDir); err != nil {
		cleanup()
		return func() {}, err
	}
	host := "localhost"
	if len(hosts) > 0 {
		host = hosts[0]
	}
	fmt.Fprintf(out, "# inferplane webhook --dev: self-signed certificate for %s in %s (valid 30 days)\n", strings.Join(hosts, ", "), o.CertDir)
	fmt.Fprintf(out, "# CA bundle (clientConfig.caBundle):\n%s\n", base64.StdEncoding.EncodeToString(b.CA))
	fmt.Fprintf(out, "# register this server with the cluster:\n#   inferplane webhook manifests --url https://%s:%d --ca-bundle-file %s | kubectl apply -f -\n",
		host, o.Port, filepath.Join(o.CertDir, webhook.CAFile))
	return cleanup, nil
}

func newWebhookManifestsCmd() *cobra.Command {
	var (
		o            install.ManifestOptions
		caFile, file string
	)
	cmd := &cobra.Command{
		Use:   "manifests",
		Short: "Print the webhook's install manifests (YAML)",
		Long: `manifests prints, as one YAML stream in apply order, the Namespace, ServiceAccount, RBAC,
Service, Deployment, PodDisruptionBudget and ValidatingWebhookConfiguration of the webhook.
The generator renders the same objects into each tenant's platform add-ons.

The configuration has failurePolicy Fail (a guarded object is refused while the webhook is
down), sideEffects None, a short timeout, admissionReviewVersions [v1], an objectSelector on the
inferplane.io/tenant label and a match condition that skips updates the policy does not read.
It has no caBundle: the running webhook fills it in (--tls-secret). With --url, only the
configuration is printed, pointing at a webhook outside the cluster (serve --dev).`,
		Example: `  # Install the webhook in the current cluster
  inferplane webhook manifests | kubectl apply -f -

  # Three replicas of a pinned image in another namespace
  inferplane webhook manifests --namespace policy --image ghcr.io/inferplane/inferplane:v0.1.0 --replicas 3

  # Only the configuration, pointing at a webhook on a workstation (webhook serve --dev)
  inferplane webhook manifests --url https://127.0.0.1:9443 --ca-bundle-file /tmp/inferplane-webhook-dev-123/ca.crt`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if caFile != "" {
				ca, err := os.ReadFile(caFile)
				if err != nil {
					return usageErr(fmt.Errorf("--ca-bundle-file: %w", err))
				}
				o.CABundle = ca
			}
			objs, err := install.Manifests(o)
			if err != nil {
				return usageErr(err)
			}
			data, err := install.YAML(objs)
			if err != nil {
				return err
			}
			return writeOut(cmd, file, data, 0o644)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.Namespace, "namespace", install.DefaultNamespace, "Kubernetes namespace of the webhook's objects")
	f.StringVar(&o.Name, "name", install.DefaultName, "name of the Deployment, Service, ServiceAccount and RBAC objects")
	f.StringVar(&o.ConfigurationName, "configuration-name", install.DefaultConfigurationName, "name of the ValidatingWebhookConfiguration")
	f.StringVar(&o.Image, "image", install.DefaultImage, "container image of inferplane that the webhook runs")
	f.Int32Var(&o.Replicas, "replicas", install.DefaultReplicas, "number of webhook replicas (keep two or more: the webhook fails closed)")
	f.Int32Var(&o.TimeoutSeconds, "timeout", install.DefaultTimeoutSeconds, "seconds the API server waits for a decision (1-30)")
	f.StringVar(&o.URL, "url", "", "https://HOST[:PORT] of a webhook outside the cluster: print only the configuration, pointing there")
	f.StringVar(&caFile, "ca-bundle-file", "", "with --url: PEM file of the CA that signed the webhook's certificate")
	addFileFlag(cmd, &file)
	return cmd
}
