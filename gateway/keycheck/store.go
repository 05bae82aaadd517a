package keycheck

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/internal/kubewatch"
)

// Store says where the keys are: a bbolt file or APIKey objects in a namespace of the host
// cluster. One of the two.
type Store struct {
	File      string
	Namespace string
}

// Validate checks that one store is named.
func (s Store) Validate() error {
	switch {
	case s.File != "" && s.Namespace != "":
		return errors.New("a key store file and a key store namespace choose different stores: give one")
	case s.File == "" && s.Namespace == "":
		return errors.New("no key store: give a key store file or namespace")
	}
	return nil
}

func (s Store) String() string {
	if s.Namespace != "" {
		return "APIKey objects in namespace " + s.Namespace
	}
	return "key store file " + s.File
}

// Syncer is the store's syncer (kube is called for a namespace only).
func (s Store) Syncer(kube func() (*rest.Config, error), log *slog.Logger) (keys.Syncer, *rest.Config, error) {
	if s.Namespace == "" {
		return &keys.FileSyncer{Store: keys.NewFileStore(s.File), Log: log}, nil, nil
	}
	if kube == nil {
		return nil, nil, errors.New("no Kubernetes client configuration for the key store")
	}
	rc, err := kube()
	if err != nil {
		return nil, nil, fmt.Errorf("kubernetes client configuration for the key store: %w", err)
	}
	return &keys.KubeSyncer{Config: rc, Namespace: s.Namespace}, rc, nil
}

// keeper keeps the index current: it loads it (retrying on the backoff until the store
// answers) and, for APIKey objects, checks the host API server and starts a new watch as soon
// as it answers after a failure, so that keys created or revoked during an outage apply within
// seconds of its return rather than after the informer's own backoff (up to a minute).
type keeper struct {
	store    Store
	syncer   keys.Syncer
	rc       *rest.Config
	idx      *keys.Index
	interval time.Duration
	log      *slog.Logger

	up      prometheus.Gauge
	resyncs prometheus.Counter
}

func newKeeper(cfg Config, idx *keys.Index, log *slog.Logger, reg prometheus.Registerer) (*keeper, error) {
	syncer, rc, err := cfg.Store.Syncer(cfg.Kube, log)
	if err != nil {
		return nil, err
	}
	k := &keeper{store: cfg.Store, syncer: syncer, rc: rc, idx: idx, log: log,
		interval: cmp.Or(cfg.StoreCheckInterval, 5*time.Second),
		up: prometheus.NewGauge(prometheus.GaugeOpts{Name: "inferplane_keycheck_store_up",
			Help: "1 when the key store answered its last check (and the index is loaded), else 0."}),
		resyncs: prometheus.NewCounter(prometheus.CounterOpts{Name: "inferplane_keycheck_store_resyncs_total",
			Help: "Watches of the key store started again after it failed and answered again."}),
	}
	keysGauge := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "inferplane_keycheck_index_keys",
		Help: "Keys in the index the checks read."}, func() float64 { return float64(idx.Len()) })
	if reg != nil {
		reg.MustRegister(k.up, k.resyncs, keysGauge)
	}
	return k, nil
}

// run loads the index, calls loaded once, then keeps it current until ctx ends.
func (k *keeper) run(ctx context.Context, loaded func()) {
	syncCtx, stop := context.WithCancel(ctx)
	b := kubewatch.Backoff()
	for {
		err := k.syncer.Sync(syncCtx, k.idx)
		if err == nil {
			break
		}
		if ctx.Err() != nil {
			stop()
			return
		}
		wait := b.Step()
		k.log.Error("key index not loaded yet; not serving until it is", "store", k.store.String(), "error", err, "retryIn", wait.Round(time.Millisecond))
		select {
		case <-ctx.Done():
			stop()
			return
		case <-time.After(wait):
		}
	}
	k.up.Set(1)
	loaded()
	if k.rc == nil {
		<-ctx.Done() // the file syncer follows the file on its own
		stop()
		return
	}
	k.watchStore(ctx, stop)
}

// watchStore checks the host API server; when it answers after failing, a new watch is
// started into the same index (its first list applies whatever changed meanwhile) and the old
// one is stopped.
func (k *keeper) watchStore(ctx context.Context, stop context.CancelFunc) {
	hc, err := rest.HTTPClientFor(k.rc)
	if err != nil {
		k.log.Error("key store checks off: client configuration", "error", err)
		<-ctx.Done()
		stop()
		return
	}
	defer hc.CloseIdleConnections()
	path := "/apis/inferplane.io/v1alpha1/namespaces/" + url.PathEscape(k.store.Namespace) + "/apikeys?limit=1"
	b := kubewatch.Backoff()
	failing := false
	for {
		next := k.interval
		if failing {
			next = b.Step()
		}
		select {
		case <-ctx.Done():
			stop()
			return
		case <-time.After(next):
		}
		err := k.check(ctx, hc, path)
		switch {
		case err != nil:
			if !failing {
				k.log.Warn("key store unreachable: checking with the keys last read", "store", k.store.String(), "error", err)
			}
			failing = true
			k.up.Set(0)
		case failing:
			newCtx, newStop := context.WithCancel(ctx)
			if err := k.syncer.Sync(newCtx, k.idx); err != nil {
				newStop()
				k.log.Warn("key store answers but its keys could not be read again; retrying", "error", err)
				continue
			}
			stop()
			stop = newStop
			failing, b = false, kubewatch.Backoff()
			k.up.Set(1)
			k.resyncs.Inc()
			k.log.Info("key store answers again: keys read again", "keys", k.idx.Len())
		}
	}
}

func (k *keeper) check(ctx context.Context, hc *http.Client, path string) error {
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return kubewatch.Get(cctx, hc, strings.TrimSuffix(k.rc.Host, "/"), path)
}

// Follow keeps idx current with store in the background as the key checks do (loading it on
// the backoff until the store answers, reading it again through a new watch as soon as the
// host API server answers after an outage) and returns at once; loaded is called once the
// index is first loaded. It is for a process that must not wait for the keys to start: the
// xDS servers, which read them for the keys' limits only.
func Follow(ctx context.Context, store Store, kube func() (*rest.Config, error), idx *keys.Index, log *slog.Logger, loaded func()) error {
	k, err := newKeeper(Config{Store: store, Kube: kube}, idx, log, nil)
	if err != nil {
		return err
	}
	go k.run(ctx, loaded)
	return nil
}
