// Package kubewatch is the watch pattern the gateway's Kubernetes readers share (the cluster
// registry, the certificates, the VMI source): a controller-runtime cache whose informers
// signal any change on one channel, so the reader lists its cache once per burst of events
// rather than handling each event.
package kubewatch

import (
	"context"
	"sync"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// Signal coalesces events into at most one pending signal on C.
type Signal struct{ C chan struct{} }

// NewSignal returns a Signal with nothing pending.
func NewSignal() *Signal { return &Signal{C: make(chan struct{}, 1)} }

// Raise leaves one signal pending (a second one before it is taken is the same one).
func (s *Signal) Raise() {
	select {
	case s.C <- struct{}{}:
	default:
	}
}

// Inform starts c's informer for obj's kind and raises s on every event of it.
func Inform(ctx context.Context, c cache.Cache, obj client.Object, s *Signal, opts ...cache.InformerGetOption) error {
	inf, err := c.GetInformer(ctx, obj, opts...)
	if err != nil {
		return err
	}
	_, err = inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { s.Raise() },
		UpdateFunc: func(any, any) { s.Raise() },
		DeleteFunc: func(any) { s.Raise() },
	})
	return err
}

// Start runs c until ctx ends and waits for its informers to sync. It returns stop, which ends
// the cache and waits for it; when the cache did not sync (ctx ended first, or the cache failed
// to start), it has already stopped and the error says why.
func Start(ctx context.Context, c cache.Cache) (stop func(), err error) {
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var startErr error
	wg.Go(func() { startErr = c.Start(ctx) })
	stop = func() { cancel(); wg.Wait() }
	if !c.WaitForCacheSync(ctx) {
		stop()
		if startErr != nil {
			return nil, startErr
		}
		return nil, context.Cause(ctx)
	}
	return stop, nil
}
