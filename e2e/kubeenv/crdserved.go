package kubeenv

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// CRDServedTimeout bounds WaitCRDsServed: generous, since on a busy machine the API server's
// discovery can trail a CRD's Established condition by seconds, and with two test runs and
// their API servers on two cores its answers themselves can take minutes.
const CRDServedTimeout = 5 * time.Minute

// WaitCRDsServed waits until every named CRD is established and served, then resets the
// client's REST mapping.
//
// Established alone is not enough: the API server sets the condition, then updates its
// discovery documents and its handler for the new resource asynchronously, and a client whose
// REST mapping misses the kind fails with "no matches for kind" (seen under load in
// webhook/e2e). So for each served version of each CRD it waits for all of what a client
// needs: the group version's discovery lists the resource, a REST mapper that starts from
// nothing (aggregated discovery) maps the kind, and a list of the resource answers.
func (e *Env) WaitCRDsServed(ctx context.Context, names ...string) error {
	if len(names) == 0 {
		return nil
	}
	hc, err := rest.HTTPClientFor(e.Config)
	if err != nil {
		return err
	}
	disco, err := discovery.NewDiscoveryClientForConfigAndClient(e.Config, hc)
	if err != nil {
		return err
	}
	md, err := metadata.NewForConfigAndClient(e.Config, hc)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, CRDServedTimeout, true, func(ctx context.Context) (bool, error) {
		last = e.crdsServed(ctx, hc, disco, md, names)
		return last == nil, nil
	})
	if err != nil {
		return fmt.Errorf("CRDs not served after %s: %w (last: %v)", CRDServedTimeout, err, last)
	}
	if e.mapper != nil {
		e.mapper.Reset()
	}
	return nil
}

// crdsServed says what is not served yet, or nil when every CRD is.
func (e *Env) crdsServed(ctx context.Context, hc *http.Client, disco discovery.DiscoveryInterface, md metadata.Interface, names []string) error {
	fresh, err := apiutil.NewDynamicRESTMapper(e.Config, hc)
	if err != nil {
		return err
	}
	listed := map[string][]string{} // group version → its resources, per discovery
	for _, name := range names {
		var crd apiextensionsv1.CustomResourceDefinition
		if err := e.Client.Get(ctx, client.ObjectKey{Name: name}, &crd); err != nil {
			return fmt.Errorf("CRD %s: %w", name, err)
		}
		if !established(&crd) {
			return fmt.Errorf("CRD %s is not Established yet", name)
		}
		for _, v := range crd.Spec.Versions {
			if !v.Served {
				continue
			}
			gvr := schema.GroupVersionResource{Group: crd.Spec.Group, Version: v.Name, Resource: crd.Spec.Names.Plural}
			gv := gvr.GroupVersion().String()
			if _, ok := listed[gv]; !ok {
				list, err := disco.ServerResourcesForGroupVersion(gv)
				if err != nil {
					return fmt.Errorf("discovery of %s: %w", gv, err)
				}
				for _, r := range list.APIResources {
					listed[gv] = append(listed[gv], r.Name)
				}
			}
			if !slices.Contains(listed[gv], gvr.Resource) {
				return fmt.Errorf("discovery of %s does not list %s yet", gv, gvr.Resource)
			}
			if _, err := fresh.RESTMapping(schema.GroupKind{Group: crd.Spec.Group, Kind: crd.Spec.Names.Kind}, v.Name); err != nil {
				return fmt.Errorf("a new client cannot map %s %s yet: %w", gv, crd.Spec.Names.Kind, err)
			}
			if _, err := md.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
				return fmt.Errorf("list %s: %w", gvr, err)
			}
		}
	}
	return nil
}

func established(crd *apiextensionsv1.CustomResourceDefinition) bool {
	for _, c := range crd.Status.Conditions {
		if c.Type == apiextensionsv1.Established && c.Status == apiextensionsv1.ConditionTrue {
			return true
		}
	}
	return false
}

// resettableMapper is controller-runtime's dynamic REST mapper, thrown away on Reset: a mapper
// keeps the API groups it discovered, and one that did so before a CRD existed can miss its
// kind (or its newer versions) afterwards.
type resettableMapper struct {
	cfg *rest.Config
	hc  *http.Client
	mu  sync.RWMutex
	m   meta.RESTMapper
}

func newResettableMapper(cfg *rest.Config) (*resettableMapper, error) {
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	r := &resettableMapper{cfg: cfg, hc: hc}
	return r, r.reset()
}

func (r *resettableMapper) reset() error {
	m, err := apiutil.NewDynamicRESTMapper(r.cfg, r.hc)
	if err != nil {
		return err
	}
	r.mu.Lock()
	r.m = m
	r.mu.Unlock()
	return nil
}

// Reset starts the mapping over from what the API server serves now.
func (r *resettableMapper) Reset() {
	// NewDynamicRESTMapper only fails without an HTTP client, which r always has.
	_ = r.reset()
}

func (r *resettableMapper) get() meta.RESTMapper {
	r.mu.RLock()
	defer r.mu.RUnlock()
	return r.m
}

func (r *resettableMapper) KindFor(res schema.GroupVersionResource) (schema.GroupVersionKind, error) {
	return r.get().KindFor(res)
}

func (r *resettableMapper) KindsFor(res schema.GroupVersionResource) ([]schema.GroupVersionKind, error) {
	return r.get().KindsFor(res)
}

func (r *resettableMapper) ResourceFor(in schema.GroupVersionResource) (schema.GroupVersionResource, error) {
	return r.get().ResourceFor(in)
}

func (r *resettableMapper) ResourcesFor(in schema.GroupVersionResource) ([]schema.GroupVersionResource, error) {
	return r.get().ResourcesFor(in)
}

func (r *resettableMapper) RESTMapping(gk schema.GroupKind, versions ...string) (*meta.RESTMapping, error) {
	return r.get().RESTMapping(gk, versions...)
}

func (r *resettableMapper) RESTMappings(gk schema.GroupKind, versions ...string) ([]*meta.RESTMapping, error) {
	return r.get().RESTMappings(gk, versions...)
}

func (r *resettableMapper) ResourceSingularizer(resource string) (string, error) {
	return r.get().ResourceSingularizer(resource)
}

var _ meta.ResettableRESTMapper = (*resettableMapper)(nil)
