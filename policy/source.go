package policy

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// Source is the policy data the rules read: tenants, node types and model masters, by name
// (all three are cluster-scoped). A name that does not exist is an error for which IsNotFound
// is true; any other error means the data could not be read, and the caller must fail closed.
//
// Store holds in-memory objects (offline validation, the generator); the webhook package reads
// the cluster through a controller-runtime client.
type Source interface {
	Tenant(ctx context.Context, name string) (*v1alpha1.Tenant, error)
	NodeType(ctx context.Context, name string) (*v1alpha1.NodeType, error)
	Master(ctx context.Context, name string) (*v1alpha1.ModelMaster, error)
	// NodeTypeNames lists every node type's name (a refusal of one offers others), sorted.
	NodeTypeNames(ctx context.Context) ([]string, error)
}

// Counter is a Source that can count what a tenant's cluster runs in a namespace: its
// ManagedInferenceJobs, VirtualMachines and the VMIs no VM owns (the webhook's, reading the
// cluster). The quota rules of admission read it for tenants with a quota; an error means
// the count could not be made, and the caller must fail closed. Offline sources (Store) do
// not count: the plan holds the inputs' jobs to the quota there.
type Counter interface {
	Running(ctx context.Context, tenant, namespace string) (*Running, error)
}

// NotFoundError says that the policy data holds no object of a kind and name.
type NotFoundError struct {
	Kind string
	Name string
}

func (e *NotFoundError) Error() string { return fmt.Sprintf("%s %q not found", e.Kind, e.Name) }

// IsNotFound reports whether err says that an object does not exist.
func IsNotFound(err error) bool {
	var nf *NotFoundError
	return errors.As(err, &nf) || apierrors.IsNotFound(err)
}

// Store is a Source over objects held in memory. The zero value is empty and ready to use; it
// is not safe for concurrent writes, but concurrent reads after the last Add are fine.
type Store struct {
	tenants   map[string]*v1alpha1.Tenant
	nodeTypes map[string]*v1alpha1.NodeType
	masters   map[string]*v1alpha1.ModelMaster
}

// NewStore returns a Store holding objs (see Add).
func NewStore(objs ...client.Object) (*Store, error) {
	s := &Store{}
	for _, o := range objs {
		if err := s.Add(o); err != nil {
			return nil, err
		}
	}
	return s, nil
}

// Add stores a Tenant, NodeType or ModelMaster (other kinds are ignored). Adding an object
// whose name is taken is fine when the two specs are equal (a master shared by two jobs is
// rendered into both), and an error otherwise.
func (s *Store) Add(obj client.Object) error {
	switch o := obj.(type) {
	case *v1alpha1.Tenant:
		return put(&s.tenants, v1alpha1.KindTenant, o.Name, o, func(a, b *v1alpha1.Tenant) bool {
			return apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
		})
	case *v1alpha1.NodeType:
		return put(&s.nodeTypes, v1alpha1.KindNodeType, o.Name, o, func(a, b *v1alpha1.NodeType) bool {
			return apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
		})
	case *v1alpha1.ModelMaster:
		return put(&s.masters, v1alpha1.KindModelMaster, o.Name, o, func(a, b *v1alpha1.ModelMaster) bool {
			return apiequality.Semantic.DeepEqual(a.Spec, b.Spec)
		})
	}
	return nil
}

func put[T any](m *map[string]*T, kind, name string, obj *T, same func(a, b *T) bool) error {
	if name == "" {
		return fmt.Errorf("%s without metadata.name", kind)
	}
	if *m == nil {
		*m = map[string]*T{}
	}
	if old, ok := (*m)[name]; ok && !same(old, obj) {
		return fmt.Errorf("%s %q is defined twice with different specs", kind, name)
	}
	(*m)[name] = obj
	return nil
}

// Tenant implements Source.
func (s *Store) Tenant(_ context.Context, name string) (*v1alpha1.Tenant, error) {
	return get(s.tenants, v1alpha1.KindTenant, name)
}

// NodeType implements Source.
func (s *Store) NodeType(_ context.Context, name string) (*v1alpha1.NodeType, error) {
	return get(s.nodeTypes, v1alpha1.KindNodeType, name)
}

// Master implements Source.
func (s *Store) Master(_ context.Context, name string) (*v1alpha1.ModelMaster, error) {
	return get(s.masters, v1alpha1.KindModelMaster, name)
}

// NodeTypeNames implements Source.
func (s *Store) NodeTypeNames(context.Context) ([]string, error) {
	return append([]string{}, s.Names(v1alpha1.KindNodeType)...), nil
}

// Names lists the names the store holds of one kind, sorted (for messages and tests).
func (s *Store) Names(kind string) []string {
	switch kind {
	case v1alpha1.KindTenant:
		return slices.Sorted(maps.Keys(s.tenants))
	case v1alpha1.KindNodeType:
		return slices.Sorted(maps.Keys(s.nodeTypes))
	case v1alpha1.KindModelMaster:
		return slices.Sorted(maps.Keys(s.masters))
	}
	return nil
}

func get[T any](m map[string]*T, kind, name string) (*T, error) {
	if o, ok := m[name]; ok {
		return o, nil
	}
	return nil, &NotFoundError{Kind: kind, Name: name}
}

// Overlay reads each name from its sources in order: the first that holds it wins, so later
// sources are fallbacks. A read error (other than not found) stops the search.
type Overlay []Source

// Tenant implements Source.
func (o Overlay) Tenant(ctx context.Context, name string) (*v1alpha1.Tenant, error) {
	return first(o, v1alpha1.KindTenant, name, func(s Source) (*v1alpha1.Tenant, error) { return s.Tenant(ctx, name) })
}

// NodeType implements Source.
func (o Overlay) NodeType(ctx context.Context, name string) (*v1alpha1.NodeType, error) {
	return first(o, v1alpha1.KindNodeType, name, func(s Source) (*v1alpha1.NodeType, error) { return s.NodeType(ctx, name) })
}

// Master implements Source.
func (o Overlay) Master(ctx context.Context, name string) (*v1alpha1.ModelMaster, error) {
	return first(o, v1alpha1.KindModelMaster, name, func(s Source) (*v1alpha1.ModelMaster, error) { return s.Master(ctx, name) })
}

// NodeTypeNames implements Source: the names every source holds, sorted, once each.
func (o Overlay) NodeTypeNames(ctx context.Context) ([]string, error) {
	all := []string{}
	for _, s := range o {
		if s == nil {
			continue
		}
		names, err := s.NodeTypeNames(ctx)
		if err != nil {
			return nil, err
		}
		all = append(all, names...)
	}
	slices.Sort(all)
	return slices.Compact(all), nil
}

func first[T any](o Overlay, kind, name string, get func(Source) (*T, error)) (*T, error) {
	for _, s := range o {
		if s == nil {
			continue
		}
		obj, err := get(s)
		if err == nil || !IsNotFound(err) {
			return obj, err
		}
	}
	return nil, &NotFoundError{Kind: kind, Name: name}
}
