package keys

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

var testSecret = []byte("0123456789abcdef0123456789abcdef-test-secret")

func newHasher(t testing.TB) *Hasher {
	t.Helper()
	h, err := NewHasher(testSecret)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

func TestKeyFormat(t *testing.T) {
	seen := map[string]bool{}
	for range 100 {
		key, id, err := Generate(nil)
		if err != nil {
			t.Fatal(err)
		}
		if !strings.HasPrefix(key, Prefix) || len(key) != KeyLen {
			t.Fatalf("key %q: want prefix %s and length %d", key, Prefix, KeyLen)
		}
		raw, err := base64.RawURLEncoding.DecodeString(key[len(Prefix):])
		if err != nil || len(raw) < 32+8 {
			t.Fatalf("key body is not URL-safe base64 of 40 bytes: %v (%d bytes)", err, len(raw))
		}
		got, err := ParseID(key)
		if err != nil || got != id || !ValidID(id) {
			t.Fatalf("ParseID(%q) = %q, %v; want %q", key, got, err, id)
		}
		if seen[id] {
			t.Fatalf("id %s generated twice", id)
		}
		seen[id] = true
	}
	for _, bad := range []string{"", "ipk_", "sk-abc", Prefix + strings.Repeat("A", KeyLen-len(Prefix)-1),
		Prefix + strings.Repeat("*", KeyLen-len(Prefix)), "IPK_" + strings.Repeat("A", KeyLen-4)} {
		if _, err := ParseID(bad); !errors.Is(err, ErrMalformed) {
			t.Errorf("ParseID(%q): %v, want ErrMalformed", bad, err)
		}
	}
}

func TestHasher(t *testing.T) {
	if _, err := NewHasher([]byte("short")); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Fatalf("a 5-byte secret was accepted: %v", err)
	}
	h := newHasher(t)
	key, _, _ := Generate(nil)
	if h.Hex(key) != h.Hex(key) || len(h.Hex(key)) != 64 {
		t.Fatal("hash is not a stable 64-digit hex")
	}
	other, _ := NewHasher(append([]byte("x"), testSecret...))
	if other.Hex(key) == h.Hex(key) {
		t.Fatal("the hash does not depend on the secret")
	}
}

func TestLoadSecret(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "secret")
	os.WriteFile(good, append(testSecret, '\n'), 0o600)
	short := filepath.Join(dir, "short")
	os.WriteFile(short, []byte("abc\n"), 0o600)

	t.Setenv(SecretEnv, "")
	if s, err := LoadSecret(good); err != nil || !bytes.Equal(s, testSecret) {
		t.Fatalf("from file: %q %v", s, err)
	}
	if _, err := LoadSecret(short); err == nil || !strings.Contains(err.Error(), short) {
		t.Fatalf("short secret: %v (want an error naming the file)", err)
	}
	if _, err := LoadSecret(filepath.Join(dir, "missing")); err == nil {
		t.Fatal("missing file accepted")
	}
	if _, err := LoadSecret(""); err == nil || !strings.Contains(err.Error(), SecretEnv) {
		t.Fatalf("no secret: %v", err)
	}
	t.Setenv(SecretEnv, string(testSecret))
	if s, err := LoadSecret(""); err != nil || !bytes.Equal(s, testSecret) {
		t.Fatalf("from env: %q %v", s, err)
	}
}

// newKey creates a key in s and returns the clear key and its record.
func newKey(t testing.TB, s Store, h *Hasher, tenant, endpoint string, expires time.Time) (string, Record) {
	t.Helper()
	key, id, err := Generate(nil)
	if err != nil {
		t.Fatal(err)
	}
	r := Record{ID: id, Tenant: tenant, Endpoint: endpoint, Name: "test", Hash: h.Hex(key),
		CreatedAt: time.Now().UTC().Truncate(time.Second), ExpiresAt: expires}
	if err := s.Create(context.Background(), r); err != nil {
		t.Fatal(err)
	}
	return key, r
}

func TestVerify(t *testing.T) {
	h := newHasher(t)
	s := NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	now := time.Now()
	wide, _ := newKey(t, s, h, "acme", "", time.Time{})
	chat, _ := newKey(t, s, h, "acme", "chat", time.Time{})
	soon, soonRec := newKey(t, s, h, "acme", "", now.Add(time.Hour))
	revoked, revRec := newKey(t, s, h, "acme", "", time.Time{})
	if _, err := s.Revoke(context.Background(), revRec.ID, now); err != nil {
		t.Fatal(err)
	}
	idx := NewIndex()
	if err := (&FileSyncer{Store: s}).Sync(t.Context(), idx); err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Hasher: h, Index: idx}
	// A key whose id exists but whose secret part differs (a forgery keeping a real id).
	forged := chat[:len(Prefix)+12] + strings.Repeat("A", KeyLen-len(Prefix)-12)
	unknown, _, _ := Generate(rand.Reader)

	cases := []struct {
		name, key, tenant, job string
		at                     time.Time
		want                   Code
		reason                 string
	}{
		{"tenant-wide key", wide, "acme", "chat", now, Allowed, "ok"},
		{"tenant-wide key, other job", wide, "acme", "embed", now, Allowed, "ok"},
		{"endpoint key on its endpoint", chat, "acme", "chat", now, Allowed, "ok"},
		{"missing", "", "acme", "chat", now, Unauthenticated, "missing"},
		{"malformed", "Bearer nonsense", "acme", "chat", now, Unauthenticated, "invalid"},
		{"unknown", unknown, "acme", "chat", now, Unauthenticated, "invalid"},
		{"forged with a real id", forged, "acme", "chat", now, Unauthenticated, "invalid"},
		{"other tenant", wide, "globex", "chat", now, Forbidden, "is not allowed on this endpoint"},
		{"other endpoint", chat, "acme", "embed", now, Forbidden, "is not allowed on this endpoint"},
		{"revoked", revoked, "acme", "chat", now, Forbidden, "revoked"},
		{"not yet expired", soon, "acme", "chat", now.Add(59 * time.Minute), Allowed, "ok"},
		{"expired", soon, "acme", "chat", now.Add(time.Hour), Forbidden, "expired"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			d := v.Verify(tc.key, tc.tenant, tc.job, tc.at)
			if d.Code != tc.want || !strings.Contains(d.Reason, tc.reason) {
				t.Fatalf("got %d %q, want %d containing %q", d.Code, d.Reason, tc.want, tc.reason)
			}
			if tc.key != "" && strings.Contains(d.Reason, tc.key) {
				t.Fatal("the reason contains the key")
			}
		})
	}
	if st := soonRec.Status(now.Add(2 * time.Hour)); st != StatusExpired {
		t.Errorf("status after expiry: %s", st)
	}
}

func TestFileStore(t *testing.T) {
	ctx := context.Background()
	h := newHasher(t)
	path := filepath.Join(t.TempDir(), "sub", "keys.db")
	s := NewFileStore(path)
	if recs, err := s.List(ctx); err != nil || len(recs) != 0 {
		t.Fatalf("a missing file lists as empty: %v %v", recs, err)
	}
	_, r := newKey(t, s, h, "acme", "chat", time.Time{})
	if st, err := os.Stat(path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("store file mode: %v %v", st.Mode(), err)
	}
	if err := s.Create(ctx, r); !errors.Is(err, ErrExists) {
		t.Fatalf("duplicate id: %v", err)
	}
	bad := r
	bad.ID, bad.Tenant = "0000000000000000", ""
	if err := s.Create(ctx, bad); err == nil || !strings.Contains(err.Error(), "tenant") {
		t.Fatalf("record without tenant: %v", err)
	}
	got, err := s.Get(ctx, r.ID)
	if err != nil || got.Hash != r.Hash || got.Tenant != "acme" || got.Endpoint != "chat" {
		t.Fatalf("get: %+v %v", got, err)
	}
	at := time.Now().UTC().Truncate(time.Second)
	rv, err := s.Revoke(ctx, r.ID, at)
	if err != nil || !rv.RevokedAt.Equal(at) {
		t.Fatalf("revoke: %+v %v", rv, err)
	}
	again, err := s.Revoke(ctx, r.ID, at.Add(time.Hour))
	if err != nil || !again.RevokedAt.Equal(at) {
		t.Fatalf("second revoke changed the record: %+v %v", again, err)
	}
	// Soft delete: the record stays, listed as revoked.
	recs, _ := s.List(ctx)
	if len(recs) != 1 || recs[0].Status(time.Now()) != StatusRevoked {
		t.Fatalf("after revoke: %+v", recs)
	}
	if _, err := s.Revoke(ctx, "ffffffffffffffff", at); !errors.Is(err, ErrNotFound) {
		t.Fatalf("revoke unknown: %v", err)
	}
	if _, err := s.Get(ctx, "ffffffffffffffff"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("get unknown: %v", err)
	}
}

// TestNoClearKeyAtRest creates keys with logging on, then looks for each key (and for its
// secret part alone) in the store file's bytes and in everything logged.
func TestNoClearKeyAtRest(t *testing.T) {
	var logs bytes.Buffer
	log := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHasher(t)
	path := filepath.Join(t.TempDir(), "keys.db")
	s := NewFileStore(path)
	var clear []string
	for range 50 {
		key, r := newKey(t, s, h, "acme", "", time.Time{})
		log.Info("created key", "id", r.ID, "tenant", r.Tenant)
		clear = append(clear, key)
	}
	idx := NewIndex()
	if err := (&FileSyncer{Store: s, Log: log}).Sync(t.Context(), idx); err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Hasher: h, Index: idx}
	for _, k := range clear {
		d := v.Verify(k, "acme", "chat", time.Now())
		log.Info("checked", "code", int(d.Code), "reason", d.Reason, "key_id", d.Key.ID)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range clear {
		body := k[len(Prefix):]
		raw, _ := base64.RawURLEncoding.DecodeString(body)
		for what, hay := range map[string][]byte{"store file": data, "log": logs.Bytes()} {
			if bytes.Contains(hay, []byte(body)) || bytes.Contains(hay, raw[idBytes:]) {
				t.Fatalf("the %s holds a clear key", what)
			}
		}
	}
	if !bytes.Contains(logs.Bytes(), []byte("code=200")) {
		t.Fatalf("the checks did not run: %s", logs.String())
	}
}

// TestFileSyncerPicksUpRevocation revokes through a second FileStore value (as the CLI does
// from another process) and waits until the running syncer's index sees it.
func TestFileSyncerPicksUpRevocation(t *testing.T) {
	h := newHasher(t)
	path := filepath.Join(t.TempDir(), "keys.db")
	key, r := newKey(t, NewFileStore(path), h, "acme", "", time.Time{})
	idx := NewIndex()
	if err := (&FileSyncer{Store: NewFileStore(path)}).Sync(t.Context(), idx); err != nil {
		t.Fatal(err)
	}
	v := &Verifier{Hasher: h, Index: idx}
	if d := v.Verify(key, "acme", "chat", time.Now()); d.Code != Allowed {
		t.Fatalf("before revoke: %+v", d)
	}
	start := time.Now()
	if _, err := NewFileStore(path).Revoke(context.Background(), r.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	key2, _ := newKey(t, NewFileStore(path), h, "acme", "", time.Time{})
	waitFor(t, "revocation and a new key reach the index", func() bool {
		return v.Verify(key, "acme", "chat", time.Now()).Code == Forbidden &&
			v.Verify(key2, "acme", "chat", time.Now()).Code == Allowed
	})
	t.Logf("file store: revocation seen by the syncer after %s", time.Since(start).Round(time.Millisecond))
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestCreateBatchAllOrNothing: a batch with one duplicate id stores none of its records.
func TestCreateBatchAllOrNothing(t *testing.T) {
	ctx := context.Background()
	h := newHasher(t)
	s := NewFileStore(filepath.Join(t.TempDir(), "keys.db"))
	_, existing := newKey(t, s, h, "acme", "", time.Time{})
	var batch []Record
	for range 10 {
		key, id, _ := Generate(nil)
		batch = append(batch, Record{ID: id, Tenant: "acme", Hash: h.Hex(key), CreatedAt: time.Now().UTC()})
	}
	bad := append(slices.Clone(batch), existing)
	if err := s.CreateBatch(ctx, bad); !errors.Is(err, ErrExists) {
		t.Fatalf("batch with a duplicate: %v", err)
	}
	if recs, _ := s.List(ctx); len(recs) != 1 {
		t.Fatalf("a failed batch stored %d records", len(recs)-1)
	}
	if err := s.CreateBatch(ctx, batch); err != nil {
		t.Fatal(err)
	}
	if recs, _ := s.List(ctx); len(recs) != 11 {
		t.Fatalf("%d records after the batch", len(recs))
	}
}
