// Package gateway assembles inferplane's gateway process: the xDS server (xds) with the
// replica source the operator chose (one Kubernetes API, every tenant cluster of the Argo CD
// registry, or a file), TLS certificates from Kubernetes Secrets, and API keys and usage
// (auth/..., usage) plugged into its extension points. cmd/inferplane parses flags into a
// Config and calls Run; the install manifests of the same process are in gateway/install.
package gateway

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/fielderr"
	"github.com/inferplane/inferplane/xds"
	"github.com/inferplane/inferplane/xds/certs"
	"github.com/inferplane/inferplane/xds/discovery"
)

// Source kinds.
const (
	// SourceKube watches the VMIs of one Kubernetes API (the gateway's own cluster).
	SourceKube = "kube"
	// SourceClusters watches the VMIs of every tenant cluster in the cluster registry.
	SourceClusters = "clusters"
	// SourceFile reads replicas from a YAML file.
	SourceFile = "file"
)

// Sources lists the source kinds.
var Sources = []string{SourceKube, SourceClusters, SourceFile}

// Source chooses where replicas come from.
type Source struct {
	Kind string
	// File and FileInterval: SourceFile.
	File         string
	FileInterval time.Duration
	// Namespaces limits SourceKube's watch (empty: every namespace).
	Namespaces []string
	// AllowForeignNamespace accepts VMIs whose namespace is not their tenant (SourceKube).
	AllowForeignNamespace bool
	// Clusters selects the registry's Secrets (SourceClusters); ClusterSyncTimeout bounds how
	// long the first configuration waits for every tenant cluster to be read, and
	// ClusterCheckInterval is how often each cluster's API server is checked (each check at
	// most ClusterCheckTimeout).
	Clusters             clusters.Options
	ClusterSyncTimeout   time.Duration
	ClusterCheckInterval time.Duration
	ClusterCheckTimeout  time.Duration
	// LastKnownGood is the file that keeps each tenant cluster's last replica set across
	// restarts (SourceClusters; "" keeps none); a set is served for at most
	// LastKnownGoodMaxAge after its cluster last answered.
	LastKnownGood       string
	LastKnownGoodMaxAge time.Duration
}

// TLS chooses the certificates Envoy terminates TLS with: kubernetes.io/tls Secrets of these
// namespaces of the gateway's cluster (none: no TLS), by label when Selector is set.
type TLS struct {
	Namespaces []string
	Selector   labels.Selector
}

// Config is the whole gateway process.
type Config struct {
	// XDS is the xDS server's own configuration; Source, Filters and the extension points are
	// filled in by Run.
	XDS     xds.Config
	Source  Source
	TLS     TLS
	APIKeys APIKeys
	// Kube is the client configuration of the cluster the gateway runs in (VMIs for
	// SourceKube, the key store in a namespace); it is called only when something needs it.
	Kube func() (*rest.Config, error)
}

// Validate checks the settings that need nothing running (Check); its errors are the
// caller's input.
func (c Config) Validate() error { return c.Check().ToAggregate() }

// Check is every setting that cannot work, as field errors whose paths name the setting
// (source.file, apiKeys.usageSaveInterval, ...): a caller that takes them from flags or a
// request names its own field for each.
func (c Config) Check() field.ErrorList {
	var errs field.ErrorList
	if err := c.XDS.Resources.Validate(); err != nil {
		errs = append(errs, fielderr.Errorf(field.NewPath("xds", "resources"), "%v", err))
	}
	if err := c.XDS.Health.Validate(); err != nil {
		errs = append(errs, fielderr.Errorf(field.NewPath("xds", "health"), "%v", err))
	}
	src := field.NewPath("source")
	switch s := c.Source; s.Kind {
	case SourceFile:
		if s.File == "" {
			errs = append(errs, field.Required(src.Child("file"), "the file source reads replicas from one"))
		}
	case SourceKube, SourceClusters:
		if s.File != "" {
			errs = append(errs, field.Forbidden(src.Child("file"), "only the "+SourceFile+" source reads a file"))
		}
		if s.Kind == SourceClusters && (len(s.Namespaces) > 0 || s.AllowForeignNamespace) {
			errs = append(errs, field.Forbidden(src.Child("namespaces"), "the clusters source watches each tenant's own namespace "+
				"in its cluster: namespaces and foreign namespaces are for the kube source"))
		}
		if err := s.Clusters.Validate(); s.Kind == SourceClusters && err != nil {
			errs = append(errs, fielderr.Errorf(src.Child("clusters"), "%v", err))
		}
	default:
		errs = append(errs, field.Invalid(src.Child("kind"), s.Kind, "expected one of "+strings.Join(Sources, ", ")))
	}
	if s := c.Source; s.Kind != SourceClusters && s.LastKnownGood != "" {
		errs = append(errs, field.Forbidden(src.Child("lastKnownGood"), "only the "+SourceClusters+" source keeps a last known good file"))
	}
	if s := c.Source; s.LastKnownGoodMaxAge < 0 {
		errs = append(errs, field.Invalid(src.Child("lastKnownGoodMaxAge"), s.LastKnownGoodMaxAge.String(), "must not be negative"))
	}
	if s := c.Source; s.ClusterCheckTimeout < 0 {
		errs = append(errs, field.Invalid(src.Child("clusterCheckTimeout"), s.ClusterCheckTimeout.String(), "must not be negative"))
	}
	return append(errs, c.APIKeys.check(field.NewPath("apiKeys"), c.XDS.GRPCAddress)...)
}

// Run runs the gateway until ctx ends, then stops it gracefully and saves the usage ledger.
func Run(ctx context.Context, cfg Config) error {
	if err := cfg.Validate(); err != nil {
		return err
	}
	log := cfg.XDS.Logger
	if log == nil {
		log = slog.Default()
		cfg.XDS.Logger = log
	}
	if cfg.XDS.Registry == nil {
		cfg.XDS.Registry = xds.NewRegistry()
	}
	src, err := newSource(cfg, log)
	if err != nil {
		return err
	}
	cfg.XDS.Source = src
	if len(cfg.TLS.Namespaces) > 0 {
		rc, err := kubeConfig(cfg.Kube)
		if err != nil {
			return err
		}
		cfg.XDS.Certificates = &certs.Kube{Config: rc, Namespaces: cfg.TLS.Namespaces, Selector: cfg.TLS.Selector, Logger: log}
	}
	finish, err := wireAPIKeys(ctx, &cfg.XDS, cfg.APIKeys, cfg.Kube, log)
	if err != nil {
		return err
	}
	err = xds.Serve(ctx, cfg.XDS)
	return errors.Join(err, finish())
}

// newSource builds the replica source of cfg.
func newSource(cfg Config, log *slog.Logger) (discovery.Source, error) {
	s := cfg.Source
	switch s.Kind {
	case SourceFile:
		return &discovery.File{Path: s.File, Interval: s.FileInterval, Logger: log}, nil
	case SourceKube:
		rc, err := kubeConfig(cfg.Kube)
		if err != nil {
			return nil, err
		}
		return &discovery.Kube{Config: rc, Namespaces: s.Namespaces, AllowForeignNamespace: s.AllowForeignNamespace, Logger: log}, nil
	case SourceClusters:
		rc, err := kubeConfig(cfg.Kube)
		if err != nil {
			return nil, err
		}
		src := &discovery.Clusters{
			Registry:      &clusters.Registry{Config: rc, Options: s.Clusters, Logger: log},
			SyncTimeout:   s.ClusterSyncTimeout,
			CheckInterval: s.ClusterCheckInterval,
			CheckTimeout:  s.ClusterCheckTimeout,
			MaxStaleAge:   s.LastKnownGoodMaxAge,
			Logger:        log,
			Registerer:    cfg.XDS.Registry,
		}
		if s.LastKnownGood != "" {
			src.KnownGood = discovery.KnownGoodFile{Path: s.LastKnownGood}
		}
		return src, nil
	}
	return nil, fmt.Errorf("source %q: expected one of %v", s.Kind, Sources)
}

func kubeConfig(kube func() (*rest.Config, error)) (*rest.Config, error) {
	if kube == nil {
		return nil, errors.New("no Kubernetes client configuration")
	}
	rc, err := kube()
	if err != nil {
		return nil, fmt.Errorf("kubernetes client configuration: %w", err)
	}
	rc = rest.CopyConfig(rc)
	rc.UserAgent = "inferplane-gateway"
	return rc, nil
}
