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

// Kind is one kind the policy knows: where the API server serves it, and the rules it is
// reviewed with. The webhook serves an endpoint per reviewed kind, its install registers them,
// and Review and Decode look kinds up here: Kinds is the one list of them.
type Kind struct {
	// GroupVersionKind is the version the webhook is called with and the policy decodes (KubeVirt
	// serves one schema for v1 and v1alpha3, so only the group and kind matter to the rules).
	schema.GroupVersionKind
	// Resource is the API server's plural resource name.
	Resource   string
	Namespaced bool
	// Rules reviews objects of the kind; nil for policy data that is read, not reviewed
	// (Tenant, NodeType).
	Rules Reviewer
}

// The kinds the policy reads, by group and kind.
var (
	GroupKindJob      = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindManagedInferenceJob}
	GroupKindMaster   = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindModelMaster}
	GroupKindTenant   = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindTenant}
	GroupKindNodeType = schema.GroupKind{Group: v1alpha1.GroupVersion.Group, Kind: v1alpha1.KindNodeType}
	GroupKindVM       = schema.GroupKind{Group: kubevirtv1.SchemeGroupVersion.Group, Kind: "VirtualMachine"}
	GroupKindVMI      = schema.GroupKind{Group: kubevirtv1.SchemeGroupVersion.Group, Kind: "VirtualMachineInstance"}
)

// Kinds are the kinds the policy reviews, then those it reads as policy data.
var Kinds = []Kind{
	{v1alpha1.GroupVersion.WithKind(GroupKindJob.Kind), "managedinferencejobs", true, jobRules},
	{v1alpha1.GroupVersion.WithKind(GroupKindMaster.Kind), "modelmasters", false, masterRules},
	{kubevirtv1.SchemeGroupVersion.WithKind(GroupKindVM.Kind), "virtualmachines", true, vmRules},
	{kubevirtv1.SchemeGroupVersion.WithKind(GroupKindVMI.Kind), "virtualmachineinstances", true, vmiRules},
	{v1alpha1.GroupVersion.WithKind(GroupKindTenant.Kind), "tenants", false, nil},
	{v1alpha1.GroupVersion.WithKind(GroupKindNodeType.Kind), "nodetypes", false, nil},
}

// KindOf is the kind gk in Kinds; ok is false for a kind the policy does not know.
func KindOf(gk schema.GroupKind) (k Kind, ok bool) {
	for _, k := range Kinds {
		if k.GroupKind() == gk {
			return k, true
		}
	}
	return Kind{}, false
}

// Reviewed are the kinds of Kinds that have rules, in order.
func Reviewed() []Kind {
	var out []Kind
	for _, k := range Kinds {
		if k.Rules != nil {
			out = append(out, k)
		}
	}
	return out
}

// New is an empty object of the kind, of the Go type the rules read.
func (k Kind) New() client.Object {
	obj, err := scheme.New(k.GroupVersionKind)
	if err != nil {
		// Kinds lists only types AddToScheme registers (TestKinds holds them to it).
		panic(fmt.Sprintf("policy: kind %s is not in the scheme: %v", k.GroupVersionKind, err))
	}
	return obj.(client.Object)
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

// Decode turns one object's JSON into the typed object the rules read, or returns nil, nil for a
// kind the policy neither reviews nor reads. strict also rejects unknown and duplicate fields:
// offline input has no API server schema in front of it. A kind field in the JSON that
// contradicts gk is an error.
func Decode(gk schema.GroupKind, raw []byte, strict bool) (client.Object, error) {
	k, ok := KindOf(gk)
	if !ok {
		return nil, nil
	}
	obj := k.New()
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

// Reviewer is the admission rules of one kind (Kind.Rules), over objects of any Go type: an
// object of another type than the kind's is an error, never a panic.
type Reviewer interface {
	// Review applies the rules to obj, reading the policy data it names from src. An object
	// that is not guarded passes. The error is only for an object of another kind or policy
	// data that could not be read: the caller must then fail closed.
	Review(ctx context.Context, src Source, obj client.Object) (Result, error)
	// Unchanged reports whether an update leaves alone everything the rules read: the spec,
	// and the inferplane.io/ labels and annotations. Such an update (a finalizer, KubeVirt's
	// own labels, a VMI's status, which KubeVirt writes through the main resource) is admitted
	// without a new review, so a tightened policy never blocks the cleanup of objects admitted
	// before it. The webhook's matchConditions say the same in CEL, so the API server does not
	// even call.
	Unchanged(old, obj client.Object) bool
}

// rules are the rules of one kind, typed.
type rules[T client.Object] struct {
	// check reads the policy data obj names and applies the rules; the error is only for data
	// that could not be read.
	check func(ctx context.Context, src Source, obj T) (field.ErrorList, error)
	// spec is what an update must leave alone, with the inferplane.io/ keys, to skip review.
	spec func(obj T) any
}

var (
	jobRules = rules[*v1alpha1.ManagedInferenceJob]{
		check: func(ctx context.Context, src Source, o *v1alpha1.ManagedInferenceJob) (field.ErrorList, error) {
			master, _ := JobMaster(o)
			d, err := lookup(ctx, src, WorkloadNames{Tenant: o.Labels[v1alpha1.LabelTenant], Master: master, NodeType: o.Spec.NodeType}, o.Namespace)
			return CheckJob(o, d), err
		},
		spec: func(o *v1alpha1.ManagedInferenceJob) any { return o.Spec }}
	masterRules = rules[*v1alpha1.ModelMaster]{
		check: func(_ context.Context, _ Source, o *v1alpha1.ModelMaster) (field.ErrorList, error) {
			return CheckMaster(o), nil
		},
		spec: func(o *v1alpha1.ModelMaster) any { return o.Spec }}
	vmRules = rules[*kubevirtv1.VirtualMachine]{
		check: func(ctx context.Context, src Source, o *kubevirtv1.VirtualMachine) (field.ErrorList, error) {
			d, err := lookup(ctx, src, vmWorkload(o).names(), o.Namespace)
			return CheckVirtualMachine(o, d), err
		},
		spec: func(o *kubevirtv1.VirtualMachine) any { return o.Spec }}
	vmiRules = rules[*kubevirtv1.VirtualMachineInstance]{
		check: func(ctx context.Context, src Source, o *kubevirtv1.VirtualMachineInstance) (field.ErrorList, error) {
			countIn := o.Namespace
			if OwnedByVM(o) {
				countIn = "" // its VM was held to the quota
			}
			d, err := lookup(ctx, src, vmiWorkload(o).names(), countIn)
			return CheckVirtualMachineInstance(o, d), err
		},
		spec: func(o *kubevirtv1.VirtualMachineInstance) any { return o.Spec }}
)

// Review implements Reviewer.
func (r rules[T]) Review(ctx context.Context, src Source, obj client.Object) (Result, error) {
	o, ok := obj.(T)
	if !ok {
		var want T
		return Result{Ref: RefOf(obj)}, fmt.Errorf("%s: a %T, where these rules read a %T", RefOf(obj), obj, want)
	}
	res := Result{Ref: RefOf(obj), Guarded: IsGuarded(obj)}
	if !res.Guarded {
		return res, nil
	}
	errs, err := r.check(ctx, src, o)
	if err != nil {
		return Result{Ref: res.Ref, Guarded: true}, err
	}
	res.Errors = errs
	return res, nil
}

// Unchanged implements Reviewer.
func (r rules[T]) Unchanged(old, obj client.Object) bool {
	o, ok1 := old.(T)
	n, ok2 := obj.(T)
	return ok1 && ok2 && sameInferplaneKeys(o.GetLabels(), n.GetLabels()) &&
		sameInferplaneKeys(o.GetAnnotations(), n.GetAnnotations()) &&
		apiequality.Semantic.DeepEqual(r.spec(o), r.spec(n))
}

// Review applies the rules of obj's kind (Kinds) to obj; kinds without rules (Tenant,
// NodeType, anything else) pass.
func Review(ctx context.Context, src Source, obj client.Object) (Result, error) {
	gvk, err := apiutil.GVKForObject(obj, scheme)
	if k, ok := KindOf(gvk.GroupKind()); ok && err == nil && k.Rules != nil {
		return k.Rules.Review(ctx, src, obj)
	}
	return Result{Ref: RefOf(obj), Guarded: IsGuarded(obj)}, nil
}

// lookup reads the named policy data; a name that is empty or not found leaves its field nil
// (the rules turn that into a violation naming it). The names of every node type are read
// only for a node type the rules will refuse, which is when they offer others. When src is a
// Counter, countIn names a namespace and the tenant has a quota, what the tenant runs there is
// counted for the quota rules; a count that fails is an error (the caller fails closed).
func lookup(ctx context.Context, src Source, n WorkloadNames, countIn string) (Data, error) {
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
	if d.NodeType == nil || d.Tenant != nil && !NodeTypeAllowed(d.Tenant.Spec.AllowedNodeTypes, nodeType) {
		names, err := src.NodeTypeNames(ctx)
		if err != nil {
			errs = append(errs, fmt.Errorf("list %ss: %w", v1alpha1.KindNodeType, err))
		}
		d.NodeTypes = names
	}
	if c, ok := src.(Counter); ok && countIn != "" && d.Tenant != nil && !d.Tenant.Spec.Quota.IsZero() {
		r, err := c.Running(ctx, tenant, countIn)
		if err != nil {
			errs = append(errs, fmt.Errorf("count what tenant %s runs in namespace %s, for its quota: %w", tenant, countIn, err))
		}
		d.Running = r
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
