package keys

import (
	"context"
	"errors"
	"os"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/inferplane/inferplane/api/v1alpha1"
	"github.com/inferplane/inferplane/auth/limits"
	"github.com/inferplane/inferplane/e2e/kubeenv"
)

var env *kubeenv.Env

func TestMain(m *testing.M) { os.Exit(kubeenv.Main(m, &env)) }

// TestKubeStore runs the store against the real API server with the APIKey CRD, and two
// syncers standing for two xDS server replicas: a key revoked through one store is refused by
// the other replica's index once the watch delivers it.
func TestKubeStore(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	const ns = "inferplane-keys"
	if err := env.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	h := newHasher(t)
	store, err := NewKubeStore(env.Config, ns)
	if err != nil {
		t.Fatal(err)
	}

	// Replica A and replica B each watch the namespace.
	idxA, idxB := NewIndex(), NewIndex()
	for _, idx := range []*Index{idxA, idxB} {
		if err := (&KubeSyncer{Config: env.Config, Namespace: ns}).Sync(t.Context(), idx); err != nil {
			t.Fatal(err)
		}
	}
	key, r := newKey(t, store, h, "acme", "chat", time.Now().Add(24*time.Hour))
	got, err := store.Get(ctx, r.ID)
	if err != nil || got.Hash != r.Hash || got.Endpoint != "chat" || got.CreatedAt.IsZero() || !got.ExpiresAt.Equal(r.ExpiresAt.Truncate(time.Second)) {
		t.Fatalf("get: %+v %v", got, err)
	}
	if err := store.Create(ctx, r); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate: %v", err)
	}
	vA, vB := &Verifier{Hasher: h, Index: idxA}, &Verifier{Hasher: h, Index: idxB}
	waitFor(t, "both replicas see the new key", func() bool {
		return vA.Verify(key, "acme", "chat", time.Now()).Code == Allowed && vB.Verify(key, "acme", "chat", time.Now()).Code == Allowed
	})

	// Limits set through the store reach replica B's index; the CRD refuses a bad one.
	lim := &v1alpha1.RateLimits{RequestsPerMinute: &v1alpha1.Limit{Value: 60}, TokensPerMonth: &v1alpha1.Limit{Value: 1e6, Mode: v1alpha1.LimitSoft}}
	if _, err := store.SetLimits(ctx, r.ID, lim); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica B sees the key's limits", func() bool {
		_, s, _ := idxB.Limits(r.ID)
		return s[limits.RequestsPerMinute].Value == 60 && s[limits.TokensPerMonth].Soft
	})
	if got, err := store.Get(ctx, r.ID); err != nil || got.Limits == nil || got.Limits.TokensPerMonth.Value != 1e6 {
		t.Fatalf("limits read back: %+v %v", got.Limits, err)
	}
	if _, err := store.SetLimits(ctx, r.ID, &v1alpha1.RateLimits{TokensPerDay: &v1alpha1.Limit{Value: 0}}); err == nil {
		t.Fatal("a limit of 0 was stored")
	}
	var raw v1alpha1.APIKey
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: r.ID}, &raw); err != nil {
		t.Fatal(err)
	}
	if err := env.Client.Patch(ctx, &raw, client.RawPatch(types.MergePatchType, []byte(`{"spec":{"limits":{"tokensPerDay":{"value":5,"mode":"loud"}}}}`))); err == nil {
		t.Error("the API server accepted mode loud")
	}
	if _, err := store.SetLimits(ctx, r.ID, nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica B sees the limits cleared", func() bool { _, s, _ := idxB.Limits(r.ID); return s.Empty() })

	// Revoke through replica A's store; replica B learns it from its watch.
	start := time.Now()
	if _, err := store.Revoke(ctx, r.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "replica B refuses the revoked key", func() bool {
		return vB.Verify(key, "acme", "chat", time.Now()).Code == Forbidden
	})
	t.Logf("revocation seen by the second replica after %s", time.Since(start).Round(time.Millisecond))

	// Soft delete: the object stays, listed as revoked.
	recs, err := store.List(ctx)
	if err != nil || len(recs) != 1 || recs[0].Status(time.Now()) != StatusRevoked {
		t.Fatalf("list: %+v %v", recs, err)
	}
	if _, err := store.Revoke(ctx, "ffffffffffffffff", time.Now()); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}

	// The CRD's own rules: a revocation cannot be undone and the hash cannot change.
	var obj v1alpha1.APIKey
	if err := env.Client.Get(ctx, types.NamespacedName{Namespace: ns, Name: r.ID}, &obj); err != nil {
		t.Fatal(err)
	}
	for name, patch := range map[string]string{
		"unrevoke":     `{"spec":{"revokedAt":null}}`,
		"rehash":       `{"spec":{"hash":"` + strings.Repeat("0", 64) + `"}}`,
		"other tenant": `{"spec":{"tenant":"globex"}}`,
	} {
		err := env.Client.Patch(ctx, &obj, client.RawPatch(types.MergePatchType, []byte(patch)))
		if err == nil {
			t.Errorf("%s: the API server accepted it", name)
		}
	}
	// Deleting the object outright (an operator's kubectl delete) removes it from the index.
	if err := env.Client.Delete(ctx, &obj); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the deleted key leaves replica B's index", func() bool { _, ok := idxB.Get(r.ID); return !ok })
}

func TestKubeStoreRejectsBadObjects(t *testing.T) {
	kubeenv.Require(t, env)
	ctx := context.Background()
	const ns = "inferplane-keys-bad"
	if err := env.EnsureNamespace(ctx, ns); err != nil {
		t.Fatal(err)
	}
	// The schema refuses what no store would write: a hash that is not 64 hex digits.
	obj := &v1alpha1.APIKey{
		ObjectMeta: metav1.ObjectMeta{Name: "0123456789abcdef", Namespace: ns},
		Spec:       v1alpha1.APIKeySpec{Tenant: "acme", Hash: "ipk_not-a-hash"},
	}
	if err := env.Client.Create(ctx, obj); err == nil || !strings.Contains(err.Error(), "hash") {
		t.Fatalf("bad hash: %v", err)
	}
	if _, err := NewKubeStore(env.Config, ""); err == nil {
		t.Fatal("a store without a namespace was accepted")
	}
	// A syncer on a namespace it cannot list still returns (here: one that exists but is empty).
	idx := NewIndex()
	if err := (&KubeSyncer{Config: env.Config, Namespace: ns}).Sync(t.Context(), idx); err != nil || idx.Len() != 0 {
		t.Fatalf("empty namespace: %v, %d keys", err, idx.Len())
	}
}
