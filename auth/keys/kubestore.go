package keys

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation/field"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/internal/fielderr"
)

// KubeStore keeps keys as APIKey objects (inferplane.io/v1alpha1) in one namespace, so that
// every auth server replica watching that namespace agrees. The object name is the key id.
type KubeStore struct {
	Client    client.Client
	Namespace string
}

// Scheme is a scheme with what the Kubernetes store reads.
func Scheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	_ = clientgoscheme.AddToScheme(s)
	_ = v1alpha1.AddToScheme(s)
	return s
}

// NewKubeStore returns a store on the API server of cfg.
func NewKubeStore(cfg *rest.Config, namespace string) (*KubeStore, error) {
	if namespace == "" {
		return nil, errors.New("the Kubernetes key store needs a namespace")
	}
	c, err := client.New(cfg, client.Options{Scheme: Scheme(), FieldValidation: metav1.FieldValidationStrict})
	if err != nil {
		return nil, fmt.Errorf("kubernetes client: %w", err)
	}
	return &KubeStore{Client: c, Namespace: namespace}, nil
}

func toObject(r Record, ns string) *v1alpha1.APIKey {
	k := &v1alpha1.APIKey{
		TypeMeta: metav1.TypeMeta{APIVersion: v1alpha1.APIVersion, Kind: v1alpha1.KindAPIKey},
		ObjectMeta: metav1.ObjectMeta{
			Name:      r.ID,
			Namespace: ns,
			Labels: map[string]string{
				v1alpha1.LabelManagedBy: v1alpha1.ManagedByValue,
				v1alpha1.LabelTenant:    r.Tenant,
			},
		},
		Spec: v1alpha1.APIKeySpec{
			Tenant:      r.Tenant,
			Endpoint:    r.Endpoint,
			DisplayName: r.Name,
			Hash:        r.Hash,
			Limits:      r.Limits,
		},
	}
	if !r.ExpiresAt.IsZero() {
		t := metav1.NewTime(r.ExpiresAt)
		k.Spec.ExpiresAt = &t
	}
	if !r.RevokedAt.IsZero() {
		t := metav1.NewTime(r.RevokedAt)
		k.Spec.RevokedAt = &t
	}
	return k
}

// FromObject converts an APIKey object to a record.
func FromObject(k *v1alpha1.APIKey) Record {
	r := Record{
		ID:        k.Name,
		Tenant:    k.Spec.Tenant,
		Endpoint:  k.Spec.Endpoint,
		Name:      k.Spec.DisplayName,
		Hash:      k.Spec.Hash,
		CreatedAt: k.CreationTimestamp.UTC(),
		Limits:    k.Spec.Limits,
	}
	if k.Spec.ExpiresAt != nil {
		r.ExpiresAt = k.Spec.ExpiresAt.UTC()
	}
	if k.Spec.RevokedAt != nil {
		r.RevokedAt = k.Spec.RevokedAt.UTC()
	}
	return r
}

// Create stores a new record. The API server sets the creation time (whole seconds).
func (s *KubeStore) Create(ctx context.Context, r Record) error {
	if err := r.Validate(); err != nil {
		return err
	}
	err := s.Client.Create(ctx, toObject(r, s.Namespace))
	if apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("%s: %w", r.ID, ErrExists)
	}
	if err != nil {
		return fmt.Errorf("create APIKey %s/%s: %w", s.Namespace, r.ID, err)
	}
	return nil
}

// Get returns one record.
func (s *KubeStore) Get(ctx context.Context, id string) (Record, error) {
	var k v1alpha1.APIKey
	err := s.Client.Get(ctx, types.NamespacedName{Namespace: s.Namespace, Name: id}, &k)
	if apierrors.IsNotFound(err) {
		return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
	}
	if err != nil {
		return Record{}, fmt.Errorf("get APIKey %s/%s: %w", s.Namespace, id, err)
	}
	return FromObject(&k), nil
}

// List returns every record in the namespace, ordered by id.
func (s *KubeStore) List(ctx context.Context) ([]Record, error) {
	var l v1alpha1.APIKeyList
	if err := s.Client.List(ctx, &l, client.InNamespace(s.Namespace)); err != nil {
		return nil, fmt.Errorf("list APIKeys in %s: %w", s.Namespace, err)
	}
	out := make([]Record, 0, len(l.Items))
	for i := range l.Items {
		out = append(out, FromObject(&l.Items[i]))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].ID < out[j].ID })
	return out, nil
}

// Revoke sets spec.revokedAt; the API server's validation keeps it from ever being unset.
func (s *KubeStore) Revoke(ctx context.Context, id string, at time.Time) (Record, error) {
	r, err := s.Get(ctx, id)
	if err != nil || !r.RevokedAt.IsZero() {
		return r, err
	}
	k := toObject(r, s.Namespace)
	t := metav1.NewTime(at.UTC())
	patch := fmt.Appendf(nil, `{"spec":{"revokedAt":%q}}`, t.UTC().Format(time.RFC3339))
	if err := s.Client.Patch(ctx, k, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		return Record{}, fmt.Errorf("revoke APIKey %s/%s: %w", s.Namespace, id, err)
	}
	return FromObject(k), nil
}

// SetLimits replaces spec.limits (a merge patch; null removes them).
func (s *KubeStore) SetLimits(ctx context.Context, id string, l *v1alpha1.RateLimits) (Record, error) {
	if err := fielderr.Err(limits.ValidateRateLimits(l, field.NewPath("limits"))); err != nil {
		return Record{}, err
	}
	r, err := s.Get(ctx, id)
	if err != nil {
		return r, err
	}
	spec := map[string]any{"limits": l}
	patch, err := json.Marshal(map[string]any{"spec": spec})
	if err != nil {
		return Record{}, err
	}
	k := toObject(r, s.Namespace)
	if err := s.Client.Patch(ctx, k, client.RawPatch(types.MergePatchType, patch)); err != nil {
		if apierrors.IsNotFound(err) {
			return Record{}, fmt.Errorf("%s: %w", id, ErrNotFound)
		}
		return Record{}, fmt.Errorf("set the limits of APIKey %s/%s: %w", s.Namespace, id, err)
	}
	return FromObject(k), nil
}

// KubeSyncer keeps an Index current from a watch on the namespace's APIKey objects.
type KubeSyncer struct {
	Config    *rest.Config
	Namespace string
	// SyncTimeout bounds the wait for the first list (default 30 s), e.g. when the APIKey CRD
	// is not installed.
	SyncTimeout time.Duration
}

// Sync starts an informer, waits for its first list, and applies every later change to idx
// as the watch delivers it (typically within milliseconds of the write).
func (k *KubeSyncer) Sync(ctx context.Context, idx *Index) error {
	c, err := cache.New(k.Config, cache.Options{
		Scheme:            Scheme(),
		DefaultNamespaces: map[string]cache.Config{k.Namespace: {}},
	})
	if err != nil {
		return fmt.Errorf("watch APIKeys in %s: %w", k.Namespace, err)
	}
	inf, err := c.GetInformer(ctx, &v1alpha1.APIKey{}, cache.BlockUntilSynced(false))
	if err != nil {
		return fmt.Errorf("watch APIKeys in %s: %w", k.Namespace, err)
	}
	upsert := func(obj any) {
		if o, ok := obj.(*v1alpha1.APIKey); ok {
			idx.Upsert(FromObject(o))
		}
	}
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    upsert,
		UpdateFunc: func(_, obj any) { upsert(obj) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if o, ok := obj.(*v1alpha1.APIKey); ok {
				idx.Delete(o.Name)
			}
		},
	}); err != nil {
		return err
	}
	// The informer lives as long as ctx; stop ends it early when the first list fails.
	runCtx, stop := context.WithCancel(ctx)
	context.AfterFunc(ctx, stop)
	errc := make(chan error, 1)
	go func() { errc <- c.Start(runCtx) }()
	timeout := k.SyncTimeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	waitCtx, cancel := context.WithTimeout(runCtx, timeout)
	defer cancel()
	if !c.WaitForCacheSync(waitCtx) {
		stop()
		select {
		case err := <-errc:
			if err != nil {
				return fmt.Errorf("watch APIKeys in %s: %w", k.Namespace, err)
			}
		default:
		}
		return fmt.Errorf("watch APIKeys in %s: no complete list within %s (is the APIKey CRD installed and readable?)", k.Namespace, timeout)
	}
	return nil
}
