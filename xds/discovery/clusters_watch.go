package discovery

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

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/client-go/rest"

	"github.com/inferplane/inferplane/clusters"
	"github.com/inferplane/inferplane/internal/kubewatch"
)

// tenantState is one tenant cluster of the registry: the runs of its source and what its
// checks found. Guarded by Clusters.mu, apart from ctx, cancel and wake.
type tenantState struct {
	cluster clusters.Cluster // the registry's current entry
	// cur is the newest run of the cluster's source; serving the run whose replicas are
	// served, nil until one has read the cluster. They differ while a new run (new
	// credentials, or a retry) has not read the cluster yet: the previous one serves.
	cur, serving *attempt
	checkErr     string    // the latest check's failure, "" after a good one
	confirmed    time.Time // when the cluster last answered with the replicas served
	since        time.Time // when its entry appeared or changed
	retries      int

	ctx    context.Context
	cancel context.CancelFunc // ends the supervisor and every run
	wake   chan struct{}      // a run failed: check now rather than at the next interval
}

// attempt is one run of a cluster's source.
type attempt struct {
	cluster  clusters.Cluster
	cancel   context.CancelFunc
	last     *Update // nil until its first read
	watchErr string  // its last failed list or watch, cleared by its next update
	stopErr  string  // why it could not start
	// retrying is the failure of the run it replaced, shown until it reads or fails itself:
	// the error shown is always the latest attempt's.
	retrying string
}

// err is the run's failure, or the one it retries after while it has not read yet.
func (a *attempt) err() string {
	if a.last == nil {
		return cmp.Or(a.stopErr, a.watchErr, a.retrying)
	}
	return cmp.Or(a.stopErr, a.watchErr)
}

func (a *attempt) broken() bool { return a.stopErr != "" || a.watchErr != "" }

// startAttempt runs the cluster's source once more; mu is held. A run that has not read the
// cluster yet is replaced; one that serves keeps serving until the new one has read it.
func (s *Clusters) startAttempt(t *tenantState, poke func(), log *slog.Logger) {
	retrying := ""
	if t.cur != nil {
		retrying = t.cur.err()
		if t.cur != t.serving {
			t.cur.cancel()
		}
	}
	actx, cancel := context.WithCancel(t.ctx)
	a := &attempt{cluster: t.cluster, cancel: cancel, retrying: retrying}
	t.cur = a
	server := strings.TrimSuffix(a.cluster.Server, "/")
	onWatchError := func(err error) {
		if benign(err) {
			return
		}
		s.mu.Lock()
		a.watchErr = kubewatch.Cause(err, server).Error()
		s.mu.Unlock()
		t.poke()
		poke()
	}
	newSource := s.NewSource
	if newSource == nil {
		newSource = func(c clusters.Cluster, onWatchError func(error)) Source {
			return &Kube{Config: c.Config, Namespaces: []string{c.Tenant}, Logger: log, OnWatchError: onWatchError}
		}
	}
	src := newSource(a.cluster, onWatchError)
	in := make(chan Update)
	go func() {
		for {
			select {
			case <-actx.Done():
				return
			case u := <-in:
				s.received(t, a, u)
				poke()
			}
		}
	}()
	go func() {
		err := src.Run(actx, in)
		if actx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("the watch stopped")
		}
		err = kubewatch.Cause(err, server)
		log.Warn("tenant cluster: its watch could not start; retrying once its API server answers", "error", err)
		s.mu.Lock()
		a.stopErr = err.Error()
		s.mu.Unlock()
		t.poke()
		poke()
	}()
}

// benign are the watch errors an informer recovers from at once (an expired resource
// version, a closed watch): not failures of the cluster.
func benign(err error) bool {
	return apierrors.IsResourceExpired(err) || apierrors.IsGone(err)
}

func (t *tenantState) poke() {
	select {
	case t.wake <- struct{}{}:
	default:
	}
}

// received keeps a run's latest update; the first one of a new run retires the one it
// replaces.
func (s *Clusters) received(t *tenantState, a *attempt, u Update) {
	s.mu.Lock()
	defer s.mu.Unlock()
	a.last, a.watchErr = &u, ""
	if a != t.cur && a != t.serving {
		return // replaced meanwhile
	}
	if a == t.cur && t.serving != a {
		if t.serving != nil {
			t.serving.cancel()
		}
		t.serving = a
	}
	if a == t.serving {
		t.confirmed = time.Now()
	}
}

// supervise checks the cluster's API server until the tenant leaves the registry: every
// CheckInterval while all is well, on the backoff while it fails; a check that passes while
// the current run is broken starts a new one.
func (s *Clusters) supervise(t *tenantState, poke func(), log *slog.Logger) {
	interval := cmp.Or(s.CheckInterval, DefaultCheckInterval)
	checker := &clusterChecker{check: s.Check}
	defer checker.close()
	b := s.backoff()
	onBackoff := false
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case <-t.ctx.Done():
			return
		case <-t.wake:
			if !onBackoff {
				onBackoff = true
				timer.Reset(b.Step())
			}
			continue
		case <-timer.C:
		}
		s.mu.Lock()
		c := t.cluster
		s.mu.Unlock()
		cctx, cancel := context.WithTimeout(t.ctx, cmp.Or(s.CheckTimeout, DefaultCheckTimeout))
		err := checker.run(cctx, c)
		cancel()
		if t.ctx.Err() != nil {
			return
		}
		if err != nil && errors.Is(err, context.DeadlineExceeded) {
			err = fmt.Errorf("no answer within %s at %s", cmp.Or(s.CheckTimeout, DefaultCheckTimeout), c.Server)
		}
		healthy, changed := s.checked(t, err, poke, log)
		if changed {
			poke()
		}
		if healthy {
			b, onBackoff = s.backoff(), false
			timer.Reset(interval)
		} else {
			onBackoff = true
			timer.Reset(b.Step())
		}
	}
}

// checked records a check's result and restarts a broken run once the server answers. It
// says whether the cluster is healthy (answers, and its current run has read it and watches)
// and whether its state changed.
func (s *Clusters) checked(t *tenantState, err error, poke func(), log *slog.Logger) (healthy, changed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	text := ""
	if err != nil {
		text = err.Error()
		if text != t.checkErr {
			log.Warn("tenant cluster: its API server check fails; its last known replicas stay", "error", text)
		}
	}
	changed = text != t.checkErr
	t.checkErr = text
	if err != nil {
		return false, changed
	}
	if t.cur.broken() {
		t.retries++
		log.Info("tenant cluster: its API server answers again: restarting its watch", "after", cmp.Or(t.cur.stopErr, t.cur.watchErr))
		s.startAttempt(t, poke, log)
		return false, true
	}
	if t.cur.last == nil {
		return false, changed // still starting
	}
	if t.cur == t.serving {
		t.confirmed = time.Now()
	}
	return true, changed
}

// clusterChecker runs the check of a cluster, with an HTTP client kept while its
// configuration stays the same.
type clusterChecker struct {
	check func(ctx context.Context, c clusters.Cluster) error
	fp    string
	hc    *http.Client
}

func (k *clusterChecker) run(ctx context.Context, c clusters.Cluster) error {
	if k.check != nil {
		return k.check(ctx, c)
	}
	if k.hc == nil || k.fp != c.Fingerprint {
		k.close()
		hc, err := rest.HTTPClientFor(c.Config)
		if err != nil {
			return fmt.Errorf("client configuration: %w", err)
		}
		k.hc, k.fp = hc, c.Fingerprint
	}
	return kubewatch.Get(ctx, k.hc, strings.TrimSuffix(c.Config.Host, "/"), CheckPath(c.Tenant))
}

func (k *clusterChecker) close() {
	if k.hc != nil {
		k.hc.CloseIdleConnections()
	}
}

// CheckPath is what the check of a tenant cluster asks its API server: one serving VMI of
// the tenant's namespace, through the same credentials, API group and permissions as the
// watch, so that a refused connection, a 401, a 403 or a missing CRD all show.
func CheckPath(tenant string) string {
	return "/apis/kubevirt.io/v1/namespaces/" + url.PathEscape(tenant) + "/virtualmachineinstances?limit=1&labelSelector=" +
		url.QueryEscape(Selector().String())
}
