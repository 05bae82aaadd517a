package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	kjson "sigs.k8s.io/json"

	"github.com/inferplane/inferplane/api/v1alpha1"
)

// The kinds the policy reads. KubeVirt serves the same schema as v1 and v1alpha3, so only the
// group and kind matter.
var (
	GroupKindJob      = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindManagedInferenceJob}
	GroupKindMaster   = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindModelMaster}
	GroupKindTenant   = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindTenant}
	GroupKindNodeType = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindNodeType}
	GroupKindVM       = schema.GroupKind{Group: kubevirtv1.SchemeGroupVersion.Group, Kind: "VirtualMachine"}
	GroupKindVMI      = schema.GroupKind{Group: kubevirtv1.SchemeGroupVersion.Group, Kind: "VirtualMachineInstance"}
)

func newObject(gk schema.GroupKind) client.Object {
	switch gk {
	case GroupKindJob:
		return &v1alpha1.ManagedInferenceJob{}
	case GroupKindMaster:
		return &v1alpha1.ModelMaster{}
	case GroupKindTenant:
		return &v1alpha1.Tenant{}
	case GroupKindNodeType:
		return &v1alpha1.NodeType{}
	case GroupKindVM:
		return &kubevirtv1.VirtualMachine{}
	case GroupKindVMI:
		return &kubevirtv1.VirtualMachineInstance{}
	}
	return nil
}

// Decode turns one object's JSON into the typed object the rules read, or returns nil, nil for a
// kind the policy neither reviews nor reads. strict also rejects unknown and duplicate fields:
// offline input has no API server schema in front of it. A kind field in the JSON that
// contradicts gk is an error.
func Decode(gk schema.GroupKind, raw []byte, strict bool) (client.Object, error) {
	obj := newObject(gk)
	if obj == nil {
		return nil, nil
	}
	if trimmed := bytes.TrimSpace(raw); len(trimmed) == 0 || trimmed[0] != '{' {
		return nil, fmt.Errorf("%s: the object is not a JSON object", gk.Kind)
	}
	if strict {
		strictErrs, err := kjson.UnmarshalStrict(raw, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", gk.Kind, err)
		}
		if len(strictErrs) > 0 {
			msgs := make([]string, len(strictErrs))
			for i, e := range strictErrs {
				msgs[i] = e.Error()
			}
			return nil, fmt.Errorf("%s: %s", gk.Kind, strings.Join(msgs, "; "))
		}
	} else if err := kjson.UnmarshalCaseSensitivePreserveInts(raw, obj); err != nil {
		return nil, fmt.Errorf("%s: %w", gk.Kind, err)
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; k != "" && k != gk.Kind {
		return nil, fmt.Errorf("the object says kind %q where %q was expected", k, gk.Kind)
	}
	return obj, nil
}

// RefOf names a decoded object for messages.
func RefOf(obj client.Object) Ref {
	kind := obj.GetObjectKind().GroupVersionKind().Kind
	switch obj.(type) {
	case *v1alpha1.ManagedInferenceJob:
		kind = v1alpha1.KindManagedInferenceJob
	case *v1alpha1.ModelMaster:
		kind = v1alpha1.KindModelMaster
	case *v1alpha1.Tenant:
		kind = v1alpha1.KindTenant
	case *v1alpha1.NodeType:
		kind = v1alpha1.KindNodeType
	case *kubevirtv1.VirtualMachine:
		kind = GroupKindVM.Kind
	case *kubevirtv1.VirtualMachineInstance:
		kind = GroupKindVMI.Kind
	}
	return Ref{Kind: kind, Namespace: obj.GetNamespace(), Name: obj.GetName()}
}

// IsGuarded reports whether obj is one of inferplane's workloads: it carries the
// inferplane.io/tenant label (a VirtualMachine also when only its template does, since that
// label reaches its VMI).
func IsGuarded(obj client.Object) bool {
	if Guarded(obj.GetLabels()) {
		return true
	}
	if vm, ok := obj.(*kubevirtv1.VirtualMachine); ok && vm.Spec.Template != nil {
		return Guarded(vm.Spec.Template.ObjectMeta.Labels)
	}
	return false
}

// Review applies the rules to obj, reading the policy data it names from src. Objects that are
// not guarded, and kinds without rules (Tenant, NodeType, anything else), pass. The error is
// only for policy data that could not be read: the caller must then fail closed.
func Review(ctx context.Context, src Source, obj client.Object) (Result, error) {
	res := Result{Ref: RefOf(obj), Guarded: IsGuarded(obj)}
	if !res.Guarded {
		return res, nil
	}
	var err error
	switch o := obj.(type) {
	case *v1alpha1.ModelMaster:
		res.Violations = CheckMaster(o)
	case *v1alpha1.ManagedInferenceJob:
		master, _ := JobMaster(o)
		var d Data
		d, err = lookup(ctx, src, o.Labels[v1alpha1.LabelTenant], master, o.Spec.NodeType)
		res.Violations = CheckJob(o, d)
	case *kubevirtv1.VirtualMachine:
		n := vmWorkload(o).names()
		var d Data
		d, err = lookup(ctx, src, n.Tenant, n.Master, n.NodeType)
		res.Violations = CheckVirtualMachine(o, d)
	case *kubevirtv1.VirtualMachineInstance:
		n := vmiWorkload(o).names()
		var d Data
		d, err = lookup(ctx, src, n.Tenant, n.Master, n.NodeType)
		res.Violations = CheckVirtualMachineInstance(o, d)
	}
	if err != nil {
		return Result{Ref: res.Ref, Guarded: true}, err
	}
	return res, nil
}

// lookup reads the named policy data; a name that is empty or not found leaves its field nil
// (the rules turn that into a violation naming it).
func lookup(ctx context.Context, src Source, tenant, master, nodeType string) (Data, error) {
	var d Data
	var errs []error
	if tenant != "" {
		t, err := src.Tenant(ctx, tenant)
		d.Tenant, errs = keep(t, err, errs, v1alpha1.KindTenant, tenant)
	}
	if master != "" {
		m, err := src.Master(ctx, master)
		d.Master, errs = keep(m, err, errs, v1alpha1.KindModelMaster, master)
	}
	if nodeType != "" {
		nt, err := src.NodeType(ctx, nodeType)
		d.NodeType, errs = keep(nt, err, errs, v1alpha1.KindNodeType, nodeType)
	}
	return d, errors.Join(errs...)
}

func keep[T any](obj *T, err error, errs []error, kind, name string) (*T, []error) {
	switch {
	case err == nil:
		return obj, errs
	case IsNotFound(err):
		return nil, errs
	}
	return nil, append(errs, fmt.Errorf("read %s %q: %w", kind, name, err))
}

// Unchanged reports whether an update leaves alone everything the rules read: the spec, and
// the inferplane.io/ labels and annotations. Such an update (a finalizer, KubeVirt's own
// labels, a VMI's status, which KubeVirt writes through the main resource) is admitted without
// a new review, so a tightened policy never blocks the cleanup of objects admitted before it.
// The webhook's matchConditions say the same thing in CEL, so the API server does not even call.
func Unchanged(old, obj client.Object) bool {
	if !sameInferplaneKeys(old.GetLabels(), obj.GetLabels()) ||
		!sameInferplaneKeys(old.GetAnnotations(), obj.GetAnnotations()) {
		return false
	}
	switch o := obj.(type) {
	case *v1alpha1.ManagedInferenceJob:
		p, ok := old.(*v1alpha1.ManagedInferenceJob)
		return ok && apiequality.Semantic.DeepEqual(p.Spec, o.Spec)
	case *v1alpha1.ModelMaster:
		p, ok := old.(*v1alpha1.ModelMaster)
		return ok && apiequality.Semantic.DeepEqual(p.Spec, o.Spec)
	case *kubevirtv1.VirtualMachine:
		p, ok := old.(*kubevirtv1.VirtualMachine)
		return ok && apiequality.Semantic.DeepEqual(p.Spec, o.Spec)
	case *kubevirtv1.VirtualMachineInstance:
		p, ok := old.(*kubevirtv1.VirtualMachineInstance)
		return ok && apiequality.Semantic.DeepEqual(p.Spec, o.Spec)
	}
	return false
}

// inferplanePrefix starts every label and annotation of the workload contract but managed-by.
const inferplanePrefix = "inferplane.io/"

func sameInferplaneKeys(a, b map[string]string) bool {
	for k, v := range a {
		if strings.HasPrefix(k, inferplanePrefix) {
			if w, ok := b[k]; !ok || w != v {
				return false
			}
		}
	}
	for k := range b {
		if _, ok := a[k]; !ok && strings.HasPrefix(k, inferplanePrefix) {
			return false
		}
	}
	return true
}
