// Package certs reads the TLS certificates the gateway serves from Kubernetes Secrets of type
// kubernetes.io/tls (as cert-manager writes them), checks each one (the key matches, it is valid
// now, Envoy can serve its key) and reports every change. Parse is pure; Kube is the watch.
package certs

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/inferplane/inferplane/internal/kubewatch"
	"github.com/inferplane/inferplane/internal/warning"
	"github.com/inferplane/inferplane/xds/resources"
)

// Update is every usable certificate, sorted by name, and what is wrong with the others.
type Update struct {
	Certificates []resources.Certificate
	Problems     []warning.Warning
}

// Source reports the certificates, in full, every time they change (Kube).
type Source interface {
	Run(ctx context.Context, out chan<- Update) error
}

// Parse reads a kubernetes.io/tls Secret as a certificate Envoy can serve at now: its name is
// namespace/name, its hosts the leaf's DNS names. The error says what is wrong; the key never
// appears in it.
func Parse(s *corev1.Secret, now time.Time) (resources.Certificate, error) {
	c := resources.Certificate{Name: s.Namespace + "/" + s.Name}
	if s.Type != corev1.SecretTypeTLS {
		return c, fmt.Errorf("type %q: expected %s", s.Type, corev1.SecretTypeTLS)
	}
	certPEM, keyPEM := s.Data[corev1.TLSCertKey], s.Data[corev1.TLSPrivateKeyKey]
	if len(certPEM) == 0 || len(keyPEM) == 0 {
		return c, fmt.Errorf("needs both %s and %s", corev1.TLSCertKey, corev1.TLSPrivateKeyKey)
	}
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		return c, fmt.Errorf("%s and %s do not make a certificate and its key: %v", corev1.TLSCertKey, corev1.TLSPrivateKeyKey, err)
	}
	leaf := pair.Leaf
	switch {
	case now.Before(leaf.NotBefore):
		return c, fmt.Errorf("not valid before %s", leaf.NotBefore.UTC().Format(time.RFC3339))
	case now.After(leaf.NotAfter):
		return c, fmt.Errorf("expired at %s", leaf.NotAfter.UTC().Format(time.RFC3339))
	case len(leaf.DNSNames) == 0:
		return c, fmt.Errorf("the certificate names no DNS host (subjectAltName)")
	}
	if err := servable(leaf); err != nil {
		return c, err
	}
	c.Hosts, c.NotAfter = slices.Clone(leaf.DNSNames), leaf.NotAfter
	c.CertPEM, c.KeyPEM = certPEM, keyPEM
	return c, nil
}

// servable refuses keys Envoy's TLS stack does not serve: it would refuse the certificate.
func servable(leaf *x509.Certificate) error {
	switch k := leaf.PublicKey.(type) {
	case *rsa.PublicKey:
		if k.N.BitLen() < 2048 {
			return fmt.Errorf("RSA key of %d bits: Envoy needs at least 2048", k.N.BitLen())
		}
	case *ecdsa.PublicKey:
		if k.Curve != elliptic.P256() && k.Curve != elliptic.P384() {
			return fmt.Errorf("ECDSA key on %s: Envoy serves P-256 and P-384", k.Curve.Params().Name)
		}
	default:
		return fmt.Errorf("%s key: Envoy serves RSA and ECDSA (P-256, P-384) keys", leaf.PublicKeyAlgorithm)
	}
	return nil
}

// Read parses Secrets into an update: the usable certificates and a problem for each other one.
func Read(secrets []corev1.Secret, now time.Time) Update {
	var u Update
	for i := range secrets {
		c, err := Parse(&secrets[i], now)
		if err != nil {
			u.Problems = append(u.Problems, warning.Warning{Object: "Secret/" + c.Name, Reason: "not served: " + err.Error()})
			continue
		}
		u.Certificates = append(u.Certificates, c)
	}
	slices.SortFunc(u.Certificates, func(a, b resources.Certificate) int { return cmp.Compare(a.Name, b.Name) })
	return u
}

// Kube watches kubernetes.io/tls Secrets in some namespaces.
type Kube struct {
	Config     *rest.Config
	Namespaces []string
	// Selector, when set, limits the Secrets read by label.
	Selector labels.Selector
	// Recheck is how often certificates are checked again without a change (one expires,
	// another becomes valid; default 1m).
	Recheck  time.Duration
	Debounce time.Duration // default 100ms
	Logger   *slog.Logger
}

// Run implements Source.
func (k *Kube) Run(ctx context.Context, out chan<- Update) error {
	log := cmp.Or(k.Logger, slog.Default())
	c, err := cache.New(k.Config, k.cacheOptions(log))
	if err != nil {
		return fmt.Errorf("TLS certificates: %w", err)
	}
	changed := kubewatch.NewSignal()
	if err := kubewatch.Inform(ctx, c, &corev1.Secret{}, changed); err != nil {
		return fmt.Errorf("TLS certificates: informer for Secrets: %w", err)
	}
	stop, err := kubewatch.Start(ctx, c)
	if err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("TLS certificates: %w", err)
	}
	defer stop()
	changed.Raise()
	recheck := time.NewTicker(cmp.Or(k.Recheck, time.Minute))
	defer recheck.Stop()
	var last string
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-changed.C:
			time.Sleep(cmp.Or(k.Debounce, 100*time.Millisecond)) // a burst settles into one update
		case <-recheck.C:
		}
		var list corev1.SecretList
		if err := c.List(ctx, &list); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			log.Error("TLS certificates: listing cached Secrets", "error", err)
			continue
		}
		u := Read(list.Items, time.Now())
		if key := fingerprint(u); key != last {
			last = key
			select {
			case out <- u:
			case <-ctx.Done():
				return nil
			}
		}
	}
}

// fingerprint identifies an update's content, so a recheck that changes nothing sends nothing.
func fingerprint(u Update) string {
	var b []byte
	for _, c := range u.Certificates {
		b = fmt.Appendf(b, "%s|%d|%x|%x;", c.Name, c.NotAfter.Unix(), c.CertPEM, c.KeyPEM)
	}
	for _, p := range u.Problems {
		b = append(b, p.String()...)
	}
	return string(b)
}

// cacheOptions watch only kubernetes.io/tls Secrets (a field selector on type) of the
// namespaces, by label when a selector is set.
func (k *Kube) cacheOptions(log *slog.Logger) cache.Options {
	scheme := k8sruntime.NewScheme()
	_ = corev1.AddToScheme(scheme)
	namespaces := map[string]cache.Config{}
	for _, ns := range k.Namespaces {
		namespaces[ns] = cache.Config{}
	}
	return cache.Options{
		Scheme:               scheme,
		DefaultNamespaces:    namespaces,
		DefaultLabelSelector: k.Selector,
		DefaultFieldSelector: fields.OneTermEqualSelector("type", string(corev1.SecretTypeTLS)),
		DefaultTransform: func(obj any) (any, error) {
			if s, ok := obj.(*corev1.Secret); ok {
				s.ManagedFields = nil
			}
			return obj, nil
		},
		DefaultWatchErrorHandler: func(ctx context.Context, r *toolscache.Reflector, err error) {
			log.Warn("TLS certificates: watching Secrets failed; keeping the last certificates", "error", err)
			toolscache.DefaultWatchErrorHandler(ctx, r, err)
		},
	}
}
