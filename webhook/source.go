package webhook

import (
	"context"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/policy"
)

// ClientSource is a policy.Source over a controller-runtime client. Reader is normally the manager's
// cached client (informers, no API round trip per admission). Live, when set, is asked again
// when Reader finds nothing: an object created a moment ago may not have reached the cache yet,
// and a denial for that reason would only make Argo CD retry.
type ClientSource struct {
	Reader client.Reader
	Live   client.Reader
}

// Tenant implements policy.Source.
func (c ClientSource) Tenant(ctx context.Context, name string) (*v1alpha1.Tenant, error) {
	return clientGet(ctx, c, name, &v1alpha1.Tenant{})
}

// NodeType implements policy.Source.
func (c ClientSource) NodeType(ctx context.Context, name string) (*v1alpha1.NodeType, error) {
	return clientGet(ctx, c, name, &v1alpha1.NodeType{})
}

// Master implements policy.Source.
func (c ClientSource) Master(ctx context.Context, name string) (*v1alpha1.ModelMaster, error) {
	return clientGet(ctx, c, name, &v1alpha1.ModelMaster{})
}

// NodeTypeNames implements policy.Source.
func (c ClientSource) NodeTypeNames(ctx context.Context) ([]string, error) {
	var list v1alpha1.NodeTypeList
	if err := c.Reader.List(ctx, &list); err != nil {
		return nil, err
	}
	names := make([]string, 0, len(list.Items))
	for _, nt := range list.Items {
		names = append(names, nt.Name)
	}
	slices.Sort(names)
	return names, nil
}

func clientGet[T client.Object](ctx context.Context, c ClientSource, name string, obj T) (T, error) {
	var zero T
	if name == "" {
		// The API server would answer with a confusing "resource name may not be empty".
		return zero, &policy.NotFoundError{Kind: policy.RefOf(obj).Kind, Name: name}
	}
	err := c.Reader.Get(ctx, client.ObjectKey{Name: name}, obj)
	if apierrors.IsNotFound(err) && c.Live != nil {
		err = c.Live.Get(ctx, client.ObjectKey{Name: name}, obj)
	}
	if apierrors.IsNotFound(err) {
		return zero, &policy.NotFoundError{Kind: policy.RefOf(obj).Kind, Name: name}
	}
	if err != nil {
		return zero, err
	}
	return obj, nil
}
