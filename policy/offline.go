package policy

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// servedVersions are the versions the API server serves the policy's kinds at.
var servedVersions = map[string][]string{
	v1alpha1.GroupVersion.Group:         {v1alpha1.GroupVersion.Version},
	kubevirtv1.SchemeGroupVersion.Group: {"v1", "v1alpha3"},
}

// FromUnstructured decodes a manifest object (internal/manifest.Decode's output) strictly into
// the typed object the rules read; nil, nil for kinds the policy neither reviews nor reads.
func FromUnstructured(u *unstructured.Unstructured) (client.Object, error) {
	gvk := u.GroupVersionKind()
	gk := gvk.GroupKind()
	if _, ok := KindOf(gk); !ok {
		return nil, nil
	}
	if served := servedVersions[gk.Group]; !slices.Contains(served, gvk.Version) {
		return nil, fmt.Errorf("%s/%s: apiVersion %q is not served; want %s/%s", gk.Kind, u.GetName(),
			u.GetAPIVersion(), gk.Group, strings.Join(served, " or "+gk.Group+"/"))
	}
	raw, err := json.Marshal(u.Object)
	if err != nil {
		return nil, fmt.Errorf("%s/%s: %w", gk.Kind, u.GetName(), err)
	}
	return Decode(gk, raw, true)
}

// ReviewObjects reviews a set of objects the way the API server would see them once applied
// together: the Tenant, NodeType and ModelMaster objects among them are the policy data, with
// base (may be nil) as the fallback for names they do not define. A name defined twice among
// objs with different specs is an error. Results come back in input order, one per object,
// allowed ones included. The generator can call this on what it is about to commit;
// `inferplane validate` calls it on the files it is given.
func ReviewObjects(ctx context.Context, base Source, objs []client.Object) ([]Result, error) {
	store := &Store{}
	for _, o := range objs {
		if err := store.Add(o); err != nil {
			return nil, err
		}
	}
	src := Overlay{store, base}
	out := make([]Result, 0, len(objs))
	for _, o := range objs {
		res, err := Review(ctx, src, o)
		if err != nil {
			return nil, err
		}
		out = append(out, res)
	}
	return out, nil
}
