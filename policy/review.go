package policy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubevirtv1 "kubevirt.io/api/core/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
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

// versions are the version the policy decodes each group's kinds at (the webhook is called
// with the object at the version it registered, and KubeVirt serves one schema for v1 and
// v1alpha3).
var versions = map[schema.GroupKind]string{
	GroupKindJob: v1alpha1.GroupVersion.Version, GroupKindMaster: v1alpha1.GroupVersion.Version,
	GroupKindTenant: v1alpha1.GroupVersion.Version, GroupKindNodeType: v1alpha1.GroupVersion.Version,
	GroupKindVM: kubevirtv1.SchemeGroupVersion.Version, GroupKindVMI: kubevirtv1.SchemeGroupVersion.Version,
}

// scheme holds the Go types of the kinds the policy reads.
var scheme = func() *runtime.Scheme {
	s := runtime.NewScheme()
	utilruntime.Must(v1alpha1.AddToScheme(s))
	utilruntime.Must(kubevirtv1.AddToScheme(s))
	return s
}()

// AddToScheme registers the Go types of the kinds the policy reads (inferplane's and
// KubeVirt's) with s: what a decoder of admission requests needs.
func AddToScheme(s *runtime.Scheme) error {
	if err := v1alpha1.AddToScheme(s); err != nil {
		return err
	}
	return kubevirtv1.AddToScheme(s)
}

// newObject is an empty object of a kind the policy reads, or nil for any other kind.
func newObject(gk schema.GroupKind) client.Object {
	v, ok := versions[gk]
	if !ok {
		return nil
	}
	obj, err := scheme.New(gk.WithVersion(v))
	if err != nil {
		return nil
	}
	return obj.(client.Object)
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
	if gvk, err := apiutil.GVKForObject(obj, scheme); err == nil {
		kind = gvk.Kind
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

// Rules are the admission rules of one kind the policy reviews, typed: the webhook runs one
// per endpoint (a controller-runtime typed validator), offline callers through Review.
type Rules[T client.Object] struct {
	Kind schema.GroupKind
	// check reads the policy data obj names and applies the rules; the error is only for data
	// that could not be read.
	check func(ctx context.Context, src Source, obj T) (field.ErrorList, error)
	// spec is what an update must leave alone, with the inferplane.io/ keys, to skip review.
	spec func(obj T) any
}

// The kinds the policy reviews.
var (
	JobRules = Rules[*v1alpha1.ManagedInferenceJob]{Kind: GroupKindJob,
		check: func(ctx context.Context, src Source, o *v1alpha1.ManagedInferenceJob) (field.ErrorList, error) {
			master, _ := JobMaster(o)
			d, err := lookup(ctx, src, WorkloadNames{Tenant: o.Labels[v1alpha1.LabelTenant], Master: master, NodeType: o.Spec.NodeType})
			return CheckJob(o, d), err
		},
		spec: func(o *v1alpha1.ManagedInferenceJob) any { return o.Spec }}
	MasterRules = Rules[*v1alpha1.ModelMaster]{Kind: GroupKindMaster,
		check: func(_ context.Context, _ Source, o *v1alpha1.ModelMaster) (field.ErrorList, error) {
			return CheckMaster(o), nil
		},
		spec: func(o *v1alpha1.ModelMaster) any { return o.Spec }}
	VMRules = Rules[*kubevirtv1.VirtualMachine]{Kind: GroupKindVM,
		check: func(ctx context.Context, src Source, o *kubevirtv1.VirtualMachine) (field.ErrorList, error) {
			d, err := lookup(ctx, src, vmWorkload(o).names())
			return CheckVirtualMachine(o, d), err
		},
		spec: func(o *kubevirtv1.VirtualMachine) any { return o.Spec }}
	VMIRules = Rules[*kubevirtv1.VirtualMachineInstance]{Kind: GroupKindVMI,
		check: func(ctx context.Context, src Source, o *kubevirtv1.VirtualMachineInstance) (field.ErrorList, error) {
			d, err := lookup(ctx, src, vmiWorkload(o).names())
			return CheckVirtualMachineInstance(o, d), err
		},
		spec: func(o *kubevirtv1.VirtualMachineInstance) any { return o.Spec }}
)

// Review applies the rules to obj, reading the policy data it names from src. An object that
// is not guarded passes. The error is only for policy data that could not be read: the caller
// must then fail closed.
func (r Rules[T]) Review(ctx context.Context, src Source, obj T) (Result, error) {
	res := Result{Ref: RefOf(obj), Guarded: IsGuarded(obj)}
	if !res.Guarded {
		return res, nil
	}
	errs, err := r.check(ctx, src, obj)
	if err != nil {
		return Result{Ref: res.Ref, Guarded: true}, err
	}
	res.Errors = errs
	return res, nil
}

// Unchanged reports whether an update leaves alone everything the rules read: the spec, and
// the inferplane.io/ labels and annotations. Such an update (a finalizer, KubeVirt's own
// labels, a VMI's status, which KubeVirt writes through the main resource) is admitted without
// a new review, so a tightened policy never blocks the cleanup of objects admitted before it.
// The webhook's matchConditions say the same thing in CEL, so the API server does not even call.
func (r Rules[T]) Unchanged(old, obj T) bool {
	return sameInferplaneKeys(old.GetLabels(), obj.GetLabels()) &&
		sameInferplaneKeys(old.GetAnnotations(), obj.GetAnnotations()) &&
		apiequality.Semantic.DeepEqual(r.spec(old), r.spec(obj))
}

// reviewer is Rules of any kind, for callers that hold objects of several kinds.
type reviewer interface {
	review(ctx context.Context, src Source, obj client.Object) (Result, error)
}

func (r Rules[T]) review(ctx context.Context, src Source, obj client.Object) (Result, error) {
	o, ok := obj.(T)
	if !ok {
		return Result{}, fmt.Errorf("%s: not a %s", RefOf(obj), r.Kind.Kind)
	}
	return r.Review(ctx, src, o)
}

var reviewers = map[schema.GroupKind]reviewer{
	GroupKindJob: JobRules, GroupKindMaster: MasterRules, GroupKindVM: VMRules, GroupKindVMI: VMIRules,
}

// Review applies the rules of obj's kind (the Rules above) to obj; kinds without rules (Tenant,
// NodeType, anything else) pass.
func Review(ctx context.Context, src Source, obj client.Object) (Result, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if r, ok := reviewers[gvk.GroupKind()]; ok && err == nil {
		return r.review(ctx, src, obj)
	}
	return Result{Ref: RefOf(obj), Guarded: IsGuarded(obj)}, nil
}

// lookup reads the named policy data; a name that is empty or not found leaves its field nil
// (the rules turn that into a violation naming it).
func lookup(ctx context.Context, src Source, n WorkloadNames) (Data, error) {
	tenant, master, nodeType := n.Tenant, n.Master, n.NodeType
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
