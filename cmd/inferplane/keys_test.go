package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/inferplane/inferplane/auth/keys"
	"github.com/inferplane/inferplane/usage"
)

// keysCLI runs the command line: create prints the key alone on stdout.
func keysCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	return execCLI(context.Background(), args...)
}

func TestKeysCommands(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "keys.db")
	secretOut, _, err := keysCLI(t, "keys", "secret")
	if err != nil || len(strings.TrimSpace(secretOut)) < 64 {
		t.Fatalf("keys secret: %q %v", secretOut, err)
	}
	secretFile := filepath.Join(dir, "secret")
	os.WriteFile(secretFile, []byte(secretOut), 0o600)
	t.Setenv(keys.SecretEnv, "")

	out, stderr, err := keysCLI(t, "keys", "create", "--store-file", store, "--secret-file", secretFile,
		"--tenant", "acme", "--endpoint", "chat", "--name", "ci", "--expires", "30d", "--force")
	if err != nil {
		t.Fatal(err)
	}
	key := strings.TrimSpace(out)
	id, err := keys.ParseID(key)
	if err != nil || out != key+"\n" {
		t.Fatalf("create printed %q (want the key alone): %v", out, err)
	}
	if !strings.Contains(stderr, id) || !strings.Contains(stderr, "only time") || strings.Contains(stderr, key) {
		t.Fatalf("create's notice: %q", stderr)
	}

	// The key works against what the store holds, and the store never saw it.
	secret, _ := keys.LoadSecret(secretFile)
	h, _ := keys.NewHasher(secret)
	rec, err := keys.NewFileStore(store).Get(context.Background(), id)
	if err != nil || rec.Hash != h.Hex(key) || rec.Endpoint != "chat" || rec.ExpiresAt.IsZero() {
		t.Fatalf("stored record: %+v %v", rec, err)
	}
	data, _ := os.ReadFile(store)
	if bytes.Contains(data, []byte(key[len(keys.Prefix):])) {
		t.Fatal("the store file holds the clear key")
	}

	// JSON output and the environment variable for the secret.
	t.Setenv(keys.SecretEnv, strings.TrimSpace(secretOut))
	out, _, err = keysCLI(t, "keys", "create", "--store-file", store, "--tenant", "globex", "-o", "json", "--force")
	var created struct {
		Key, ID, Tenant, Status string
	}
	if err != nil || json.Unmarshal([]byte(out), &created) != nil || created.Tenant != "globex" || created.Status != "active" || !strings.HasPrefix(created.Key, keys.Prefix) {
		t.Fatalf("create -o json: %q %v", out, err)
	}

	out, _, err = keysCLI(t, "keys", "list", "--store-file", store)
	if err != nil || !strings.Contains(out, id) || !strings.Contains(out, created.ID) || strings.Contains(out, key) {
		t.Fatalf("list: %q %v", out, err)
	}
	out, _, _ = keysCLI(t, "keys", "list", "--store-file", store, "--tenant", "acme")
	if strings.Contains(out, created.ID) {
		t.Fatalf("list --tenant acme shows globex's key: %q", out)
	}

	out, _, err = keysCLI(t, "keys", "revoke", "--store-file", store, "--yes", id)
	if err != nil || !strings.Contains(out, "revoked "+id) {
		t.Fatalf("revoke: %q %v", out, err)
	}
	out, _, err = keysCLI(t, "keys", "revoke", "--store-file", store, "--yes", id)
	if err != nil || !strings.Contains(out, "already revoked") {
		t.Fatalf("second revoke: %q %v", out, err)
	}
	out, _, _ = keysCLI(t, "keys", "list", "--store-file", store, "--status", "revoked", "-o", "json")
	var listed []struct{ ID, Status string }
	if json.Unmarshal([]byte(out), &listed) != nil || len(listed) != 1 || listed[0].ID != id || listed[0].Status != "revoked" {
		t.Fatalf("list --status revoked: %q", out)
	}
}

func TestKeysCommandErrors(t *testing.T) {
	dir := t.TempDir()
	store := filepath.Join(dir, "keys.db")
	t.Setenv(keys.SecretEnv, strings.Repeat("s", 40))
	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"keys", "create", "--store-file", store}, 2, `required flag(s) "tenant" not set`},
		{[]string{"keys", "create", "--store-file", store, "--tenant", "Not_A_Name"}, 2, "--tenant"},
		{[]string{"keys", "create", "--store-file", store, "--tenant", "acme", "--expires", "yesterday"}, 2, "--expires"},
		{[]string{"keys", "create", "--store-file", store, "--tenant", "acme", "--expires", "2001-01-01"}, 2, "not in the future"},
		{[]string{"keys", "create", "--store-file", store, "--tenant", "acme", "--namespace", "x"}, 2, "one"},
		{[]string{"keys", "revoke", "--store-file", store, "nope"}, 2, "not a key id"},
		{[]string{"keys", "revoke", "--store-file", store, "ipk_" + strings.Repeat("A", keys.KeyLen-4)}, 2, "that is a key, not a key id: its id is 0000000000000000"},
		{[]string{"keys", "revoke", "--store-file", store, "0123456789abcdef"}, 1, "does not exist"},
		{[]string{"keys", "list", "--store-file", store, "--status", "gone"}, 2, "--status"},
		{[]string{"keys", "usage", "--server", "not a url"}, 2, "--server"},
		{[]string{"keys", "usage", "--since", "last week"}, 2, "--since"},
	} {
		_, _, err := keysCLI(t, tc.args...)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("%v: exit %d %v; want exit %d mentioning %q", tc.args, exitCode(err), err, tc.code, tc.msg)
		}
	}
	t.Setenv(keys.SecretEnv, "short")
	if _, _, err := keysCLI(t, "keys", "create", "--store-file", store, "--tenant", "acme"); err == nil || !strings.Contains(err.Error(), "at least 32") {
		t.Errorf("short secret: %v", err)
	}
	if _, err := os.Stat(store); !os.IsNotExist(err) {
		t.Errorf("failed commands created the store file: %v", err)
	}
}

func TestHealthAndUsageCommands(t *testing.T) {
	now := time.Now()
	agg := usage.NewAggregator(usage.Options{Replicas: usage.ReplicaFunc(func() []usage.ReplicaCount {
		return []usage.ReplicaCount{{Tenant: "acme", Job: "chat", Ready: 2, Total: 2}, {Tenant: "acme", Job: "down", Ready: 0, Total: 1}}
	})})
	for i := range 50 {
		agg.Add(usage.Entry{Tenant: "acme", Job: "chat", KeyID: "00112233aabbccdd", Code: 200, Done: now,
			Latency: time.Duration(10+i) * time.Millisecond, TokensIn: 5, TokensOut: 7})
	}
	srv := httptest.NewServer(usage.Handler(agg))
	defer srv.Close()

	out, _, err := keysCLI(t, "health", "--server", srv.URL, "--tenant", "acme")
	if exitCode(err) != 1 || !strings.Contains(err.Error(), "acme/down") {
		t.Fatalf("an unavailable endpoint must exit 1 naming it: %v", err)
	}
	for _, want := range []string{"TENANT", "chat", "healthy", "2/2", "100.0%", "down", "unavailable", "no ready replica"} {
		if !strings.Contains(out, want) {
			t.Errorf("health table lacks %q:\n%s", want, out)
		}
	}
	out, _, _ = keysCLI(t, "health", "--server", srv.URL, "-o", "json")
	var rep usage.HealthReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Endpoints) != 2 || rep.Endpoints[0].Requests != 50 {
		t.Fatalf("health -o json: %v %q", err, out)
	}

	out, _, err = keysCLI(t, "keys", "usage", "--server", srv.URL, "--since", "24h")
	if err != nil || !strings.Contains(out, "00112233aabbccdd") || !strings.Contains(out, "250") || !strings.Contains(out, "350") {
		t.Fatalf("keys usage: %q %v", out, err)
	}
	out, _, err = keysCLI(t, "keys", "usage", "--server", srv.URL, "--hourly")
	if err != nil || !strings.Contains(out, now.UTC().Format("2006-01-02 15:00")) {
		t.Fatalf("keys usage --hourly: %q %v", out, err)
	}

	srv.Close()
	if _, _, err := keysCLI(t, "health", "--server", srv.URL); err == nil || !strings.Contains(err.Error(), "reach the xDS server") {
		t.Fatalf("server down: %v", err)
	}
}

// Two xDS server replicas each count the access logs of their own Envoys: `keys usage` with
// one --server per replica sums them per key and hour, and refuses a partial sum.
func TestKeysUsageSumsServerReplicas(t *testing.T) {
	now := time.Now()
	replica := func(requests int) *httptest.Server {
		agg := usage.NewAggregator(usage.Options{})
		for range requests {
			agg.Add(usage.Entry{Tenant: "acme", Job: "chat", KeyID: "00112233aabbccdd", Code: 200, Done: now, TokensIn: 5, TokensOut: 7})
		}
		srv := httptest.NewServer(usage.Handler(agg))
		t.Cleanup(srv.Close)
		return srv
	}
	a, b := replica(3), replica(4)
	out, _, err := keysCLI(t, "keys", "usage", "--server", a.URL, "--server", b.URL, "-o", "json")
	if err != nil {
		t.Fatalf("keys usage: %v", err)
	}
	var rep usage.UsageReport
	if err := json.Unmarshal([]byte(out), &rep); err != nil || len(rep.Keys) != 1 {
		t.Fatalf("keys usage -o json: %v %q", err, out)
	}
	if got, want := rep.Keys[0].Total, (usage.Hour{Requests: 7, TokensIn: 35, TokensOut: 49}); got != want {
		t.Errorf("summed usage %+v, want %+v", got, want)
	}
	if len(rep.Keys[0].Hours) != 1 || rep.Keys[0].Hours[0].Requests != 7 {
		t.Errorf("hours not summed: %+v", rep.Keys[0].Hours)
	}
	b.Close()
	if _, _, err := keysCLI(t, "keys", "usage", "--server", a.URL, "--server", b.URL); err == nil || !strings.Contains(err.Error(), "reach the xDS server") {
		t.Fatalf("a replica down must fail the command, not print a partial sum: %v", err)
	}
}
